"""agl-apo's plugin (filled in below)."""
