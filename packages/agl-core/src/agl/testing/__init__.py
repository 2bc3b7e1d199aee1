"""Conformance suites and test servers for agl's backends and plugins (pytest required).

- :mod:`agl.testing.store`: what every store backend must do;
- :mod:`agl.testing.algorithm`: what every algorithm must do, run through a real Trainer;
- :mod:`agl.testing.instrumentor`: what every instrumentor must record, against a real server;
- :mod:`agl.testing.openai_server`: a scripted OpenAI-compatible server speaking vLLM's wire
  protocol (token ids, logprobs, streaming);
- :mod:`agl.testing.ports`: a free loopback port for a server started in another process;
- :mod:`agl.testing.disks`: a small real disk to fill up, for tests of a full disk.
"""
