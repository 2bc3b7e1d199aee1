"""How agl's HTTP servers run: a server on a thread of its own, uvicorn with agl's limits,
bearer tokens, TLS, and the ``Allow`` header of a 405.

Private: the store server, the gateway and the dashboard build on it.
"""
