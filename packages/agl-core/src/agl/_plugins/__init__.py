"""The plugin manager's implementation; :mod:`agl.plugins` is its public face."""
