#!/usr/bin/env bash
# Install the two agent programs this example runs, at the versions it was checked with, into
# ./node (ignored by git). Needs Node.js and npm; agl itself does not depend on either.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
npm install --prefix "$here/node" --no-audit --no-fund \
    @anthropic-ai/claude-code@2.1.328 @openai/codex@0.169.0
"$here/node/node_modules/.bin/claude" --version
"$here/node/node_modules/.bin/codex" --version
