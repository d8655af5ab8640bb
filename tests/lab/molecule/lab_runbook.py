"""ansible-playbook as an operator runs it against a lab scenario (shared by the multinode and rollout scenarios'
verifier tests): the scenario's inventory - molecule's, with its group_vars and host_vars beside it - and the
repository's ansible.cfg and built collection, not molecule's."""
import os
import subprocess

ROOT = os.environ["GPUSERVE_ROOT"]


def molecule_inventory():
    return os.environ.get("MOLECULE_INVENTORY_FILE") or os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"],
                                                                     "inventory", "ansible_inventory.yml")


def ansible_playbook(argv, **env_extra):
    """ansible-playbook ``argv`` from the repository root; stderr appended to stdout (failures may go there)."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), **env_extra)
    p = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-playbook")] + list(argv), capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=900, check=False)
    p.stdout += p.stderr
    return p
