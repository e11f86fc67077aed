"""Example novasched plugins: two host filters and one weigher, registered by entry point.

- ``DedicatedCloudFilter``: hosts of a ``dedicated_cloud=<project>`` aggregate take only that
  project's instances; projects listed in ``[example_plugins] dedicated_projects`` land only
  on their dedicated hosts.
- ``LocalDiskFilter``: flavors with ``local_disk=true`` land only on hosts with local storage
  and room for root + ephemeral + swap on it.
- ``RackSpreadWeigher``: spreads a server group's instances across racks.
"""
