"""A cloud's own scheduler plugins, written against nova 34's base classes as they would be
for nova-scheduler (tests/functional/test_nova_plugins.py loads them into novasched)."""
