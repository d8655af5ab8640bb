"""pve_lxc: compare asked-for CT options with what Proxmox stores, as Proxmox stores them."""
import pytest

from unit_helpers import load_module_util

PL = load_module_util("pve.lxc")

OPERATOR = {"hostname": "sglang", "cores": "16", "memory": "65536", "swap": "0", "unprivileged": "1",
            "features": "keyctl=1,nesting=1", "rootfs": "local-zfs:subvol-129-disk-0,size=200G",
            "net0": "name=eth0,bridge=vmbr0,firewall=1,hwaddr=BC:24:11:AA:BB:CC,ip=dhcp,type=veth"}


def test_same_values_in_proxmox_form_need_no_change():
    wanted = {"hostname": "sglang", "cores": PL.pve_value(16), "memory": "65536", "swap": "0",
              "unprivileged": PL.pve_value(True), "features": "nesting=1", "rootfs": "local-lvm:200",
              "net0": "name=eth0,bridge=vmbr0,ip=dhcp"}
    assert PL.config_changes(OPERATOR, wanted) == ({}, [])


def test_only_differing_options_change_and_property_strings_compare_by_key():
    changes, conflicts = PL.config_changes(OPERATOR, {"memory": "98304", "net0": "name=eth0,bridge=vmbr1,ip=dhcp",
                                                      "onboot": "1"})
    assert changes == {"memory": "98304", "net0": "name=eth0,bridge=vmbr1,ip=dhcp", "onboot": "1"}
    assert conflicts == []


def test_create_only_options_and_disk_size_are_conflicts_not_changes():
    changes, conflicts = PL.config_changes(OPERATOR, {"unprivileged": "0", "rootfs": "local-lvm:64", "cores": "8"})
    assert changes == {"cores": "8"}
    assert [c.split(":")[0] for c in conflicts] == ["rootfs", "unprivileged"]


def test_create_needs_a_template_and_passes_start():
    with pytest.raises(PL.PveLxcError, match="ostemplate: CT 129 does not exist"):
        PL.create_params(129, {"hostname": "x"})
    assert PL.create_params(129, {"ostemplate": "local:vztmpl/t.tar.zst"}, start=True) == \
        {"ostemplate": "local:vztmpl/t.tar.zst", "vmid": 129, "start": 1}


def test_an_option_left_out_by_proxmox_has_its_schema_default():
    # a privileged CT's config has no "unprivileged" key (and none for onboot 0): asking for those defaults
    # changes nothing, asking otherwise is a change (onboot) or a create-only conflict (unprivileged)
    bare = {"hostname": "sglang", "cores": "16"}
    assert PL.config_changes(bare, {"unprivileged": PL.pve_value(False), "onboot": PL.pve_value(False)}) == ({}, [])
    changes, conflicts = PL.config_changes(bare, {"unprivileged": PL.pve_value(True), "onboot": PL.pve_value(True)})
    assert changes == {"onboot": "1"} and [c.split(":")[0] for c in conflicts] == ["unprivileged"]
    assert PL.config_changes(bare, {"features": "nesting=1"}) == ({"features": "nesting=1"}, [])
