"""Fault tests (issue 10): the scheduler against real services with faults injected by a
loopback TCP proxy the tests control (``tests/faults/proxy.py``).

* ``test_proxy.py``: the proxy itself (cut, delay, drop_after, trip, slow responses, close).
* ``test_scenarios.py``: a broker outage under load, a dead cell, a stuck cell, Placement
  lost in the middle of a multi-create, slow claims; each ends with the Placement audit
  (``fixtures.FaultCloud.audit``: no claim without a successful reply).

Part of the same suite, kept where they are rather than duplicated here:
``tests/functional/test_race.py`` (two scheduler processes racing for the last slots never
over-commit) and ``tests/functional/test_rpc.py`` (SIGTERM under load: in-flight calls finish
and reply).
"""
