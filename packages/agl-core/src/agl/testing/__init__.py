"""Conformance suites for store backends and plugins (pytest required).

See :mod:`agl.testing.store`.
"""
