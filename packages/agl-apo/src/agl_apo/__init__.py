"""agl-apo: automatic prompt optimization."""
