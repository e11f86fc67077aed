"""nova-compute with the deployment suite's own virt drivers (run under nova 34's venv).

nova loads ``compute_driver`` from the ``nova.virt`` package only, so this launcher makes
``SecureFakeDriver`` importable as ``nova.virt.novasched_fake`` and then runs nova's own
``nova-compute`` entry point with the command line it was given.

``SecureFakeDriver`` is nova's fake driver reporting what a host with dedicated CPUs
(``[compute] cpu_dedicated_set``: PCPU inventory) and an emulated TPM reports: PCPU and the
``COMPUTE_SECURITY_TPM_*`` traits, as libvirt's driver does with swtpm installed.
"""

import sys
import types

PCPUS = 8
TRAITS = (
    "COMPUTE_SECURITY_TPM_1_2",
    "COMPUTE_SECURITY_TPM_2_0",
    "COMPUTE_SECURITY_TPM_TIS",
    "COMPUTE_SECURITY_TPM_CRB",
    # where the vTPM's secret may live (nova 34 asks for the flavor's hw:tpm_secret_security,
    # "user" by default)
    "COMPUTE_SECURITY_TPM_SECRET_SECURITY_USER",
    "COMPUTE_SECURITY_TPM_SECRET_SECURITY_HOST",
)


def _register() -> None:
    from nova.virt import fake

    class SecureFakeDriver(fake.FakeDriverWithoutFakeNodes):
        def update_provider_tree(self, provider_tree, nodename, allocations=None):
            super().update_provider_tree(provider_tree, nodename, allocations=allocations)
            inventory = dict(provider_tree.data(nodename).inventory)
            inventory["PCPU"] = {
                "total": PCPUS,
                "min_unit": 1,
                "max_unit": PCPUS,
                "step_size": 1,
                "allocation_ratio": 1.0,
                "reserved": 0,
            }
            provider_tree.update_inventory(nodename, inventory)
            provider_tree.add_traits(nodename, *TRAITS)

    module = types.ModuleType("nova.virt.novasched_fake")
    module.SecureFakeDriver = SecureFakeDriver
    sys.modules[module.__name__] = module


def main() -> int:
    # nova's entry point first: importing it chooses nova's threading model (monkey_patch),
    # which must happen before anything else of nova is imported
    from nova.cmd import compute

    _register()
    sys.argv[0] = "nova-compute"
    return compute.main()


if __name__ == "__main__":
    sys.exit(main())
