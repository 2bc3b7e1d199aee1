"""agl-torch's plugin stays light: looking its algorithms up imports neither torch nor transformers.

Every agl process that resolves a plugin name (runners, ``agl plugins``, a trainer) calls the
provider hooks, so a heavy import there would slow all of them down.
"""

from __future__ import annotations

import subprocess
import sys


def test_looking_up_the_algorithms_imports_no_torch() -> None:
    code = (
        "import sys\n"
        "from agl.plugins import PluginManager\n"
        "names = sorted(PluginManager().provided('agl_algorithms'))\n"
        "assert 'lightningrl-torch' in names and 'sft-torch' in names, names\n"
        "heavy = [m for m in ('torch', 'transformers', 'peft') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
