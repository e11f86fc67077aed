"""What an operator watches while the scheduler runs: Prometheus metrics (``metrics``), the
``/metrics``, ``/healthz`` and ``/readyz`` listener (``exporter``), each worker's health
publisher (``monitor``) and the Guru Meditation Report on SIGUSR2 (``gmr``)."""
