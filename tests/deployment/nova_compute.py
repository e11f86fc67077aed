"""nova-compute with the deployment suite's own virt drivers (run under nova 34's venv).

nova loads ``compute_driver`` from the ``nova.virt`` package only, so this launcher makes
``SecureFakeDriver`` and ``PciFakeDriver`` importable as ``nova.virt.novasched_fake`` and then
runs nova's own ``nova-compute`` entry point with the command line it was given.

``SecureFakeDriver`` is nova's fake driver reporting what a host with dedicated CPUs
(``[compute] cpu_dedicated_set``: PCPU inventory) and an emulated TPM reports: PCPU and the
``COMPUTE_SECURITY_TPM_*`` traits, as libvirt's driver does with swtpm installed.

``PciFakeDriver`` is nova's fake driver reporting, as libvirt's driver reports a host's PCI
devices (``pci_passthrough_devices``), two whole NICs (``type-PCI``: no SR-IOV, so no PF/VF
relations and none of the sysfs lookups nova makes for them) of one vendor and product. With
``[pci] device_spec`` matching them and ``[pci] report_in_placement``, nova-compute puts each
in Placement as a child of the compute node's provider, ``<hostname>_<PCI address>``, with
one ``CUSTOM_PCI_<VENDOR>_<PRODUCT>``. This module imports nothing of nova at its top: the
deployment suite imports it for the devices' ids.
"""

import json
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
# PciFakeDriver's devices: an Intel 82599 NIC's ids, at two PCI addresses
PCI_VENDOR_ID = "8086"
PCI_PRODUCT_ID = "10fb"
PCI_ADDRESSES = ("0000:81:00.0", "0000:82:00.0")


def pci_devices() -> list[dict]:
    """The devices as libvirt's driver reports them (``nova.virt.libvirt.host``)."""
    return [
        {
            "dev_id": "pci_" + address.replace(":", "_").replace(".", "_"),
            "address": address,
            "vendor_id": PCI_VENDOR_ID,
            "product_id": PCI_PRODUCT_ID,
            "numa_node": 0,
            "label": f"label_{PCI_VENDOR_ID}_{PCI_PRODUCT_ID}",
            "dev_type": "type-PCI",
            "parent_addr": None,
        }
        for address in PCI_ADDRESSES
    ]


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

    class PciFakeDriver(fake.FakeDriverWithoutFakeNodes):
        def get_available_resource(self, nodename):
            resources = super().get_available_resource(nodename)
            if resources:  # (empty for a node that is not ours)
                resources["pci_passthrough_devices"] = json.dumps(pci_devices())
            return resources

    module = types.ModuleType("nova.virt.novasched_fake")
    module.SecureFakeDriver = SecureFakeDriver
    module.PciFakeDriver = PciFakeDriver
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
