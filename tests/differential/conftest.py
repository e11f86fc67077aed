from tests.differential.harness import nova  # noqa: F401 - the module-scoped fixture
