# -*- coding: utf-8 -*-
# Copyright (c) 2017 Ansible Project (ansible.builtin.ssh's option documentation, copied verbatim below)
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
    name: pct
    short_description: Run tasks in a Proxmox VE container through pct exec, over OpenSSH to its node
    description:
        - Runs every command of a task inside LXC container O(vmid) of a Proxmox VE node, as
          C(pct exec <vmid> -- <command>) over the OpenSSH client to the node - the same command
          C(community.proxmox.proxmox_pct_remote) runs, over C(ansible.builtin.ssh) instead of paramiko.
        - Everything else is C(ansible.builtin.ssh) with its options (documented below as they are there) - OpenSSH
          connection sharing (C(ControlMaster)/C(ControlPersist)) lets every task reuse one connection to the node
          instead of a paramiko handshake per task, and pipelining sends a module on stdin in one C(pct exec).
          Measured on the lab, a deploy.yml that changes nothing drops from about 33 s (paramiko) to the figure in
          README.
        - No PTY is ever requested (none is needed as root, and C(lxc-attach) then proxies plain pipes); files are
          put and fetched through C(cat) inside the container, never written on the node.
        - The node's user is O(remote_user); when it is not root, C(pct) is run through O(proxmox_become_method).
    author:
        - ansible (@core) (ansible.builtin.ssh, which this extends)
        - Nils Stein (@mietzen) (community.proxmox.proxmox_pct_remote, whose pct command this runs)
        - gpuserve.sglang contributors (@gpuserve)
    extends_documentation_fragment:
        - connection_pipelining
    version_added: 0.4.0
    notes:
        - The options are those of C(ansible.builtin.ssh) (a unit test keeps the copy equal) plus O(vmid) and
          O(proxmox_become_method).
    options:
      vmid:
          description: The container's id on the node (C(pct exec <vmid>)).
          type: int
          required: true
          vars:
              - name: proxmox_vmid
      proxmox_become_method:
          description: How the node's O(remote_user) runs C(pct) when it is not root.
          type: str
          default: sudo
          vars:
              - name: proxmox_become_method
      host:
          description: Hostname/IP to connect to.
          default: inventory_hostname
          type: string
          vars:
               - name: inventory_hostname
               - name: ansible_host
               - name: ansible_ssh_host
               - name: delegated_vars['ansible_host']
               - name: delegated_vars['ansible_ssh_host']
      host_key_checking:
          description: Determines if SSH should reject or not a connection after checking host keys.
          default: True
          type: boolean
          ini:
              - section: defaults
                key: 'host_key_checking'
              - section: ssh_connection
                key: 'host_key_checking'
                version_added: '2.5'
                version_added_collection: ansible.builtin
          env:
              - name: ANSIBLE_HOST_KEY_CHECKING
              - name: ANSIBLE_SSH_HOST_KEY_CHECKING
                version_added: '2.5'
                version_added_collection: ansible.builtin
          vars:
              - name: ansible_host_key_checking
                version_added: '2.5'
                version_added_collection: ansible.builtin
              - name: ansible_ssh_host_key_checking
                version_added: '2.5'
                version_added_collection: ansible.builtin
      password:
          description: Authentication password for the O(remote_user). Can be supplied as CLI option.
          type: string
          vars:
              - name: ansible_password
              - name: ansible_ssh_pass
              - name: ansible_ssh_password
      password_mechanism:
          description: Mechanism to use for handling ssh password prompt
          type: string
          default: ssh_askpass
          choices:
              - ssh_askpass
              - sshpass
              - disable
          version_added: '2.19'
          version_added_collection: ansible.builtin
          env:
              - name: ANSIBLE_SSH_PASSWORD_MECHANISM
          ini:
              - {key: password_mechanism, section: ssh_connection}
          vars:
              - name: ansible_ssh_password_mechanism
      sshpass_prompt:
          description:
              - Password prompt that C(sshpass)/C(SSH_ASKPASS) should search for.
              - Supported by sshpass 1.06 and up when O(password_mechanism) set to V(sshpass).
              - Defaults to C(Enter PIN for) when pkcs11_provider is set.
              - Defaults to C(assword) when O(password_mechanism) set to V(ssh_askpass).
          default: ''
          type: string
          ini:
              - section: 'ssh_connection'
                key: 'sshpass_prompt'
          env:
              - name: ANSIBLE_SSHPASS_PROMPT
          vars:
              - name: ansible_sshpass_prompt
          version_added: '2.10'
          version_added_collection: ansible.builtin
      ssh_args:
          description: Arguments to pass to all SSH CLI tools.
          default: '-C -o ControlMaster=auto -o ControlPersist=60s'
          type: string
          ini:
              - section: 'ssh_connection'
                key: 'ssh_args'
          env:
              - name: ANSIBLE_SSH_ARGS
          vars:
              - name: ansible_ssh_args
                version_added: '2.7'
                version_added_collection: ansible.builtin
      ssh_common_args:
          description: Common extra args for all SSH CLI tools.
          type: string
          ini:
              - section: 'ssh_connection'
                key: 'ssh_common_args'
                version_added: '2.7'
                version_added_collection: ansible.builtin
          env:
              - name: ANSIBLE_SSH_COMMON_ARGS
                version_added: '2.7'
                version_added_collection: ansible.builtin
          vars:
              - name: ansible_ssh_common_args
          cli:
              - name: ssh_common_args
          default: ''
      ssh_executable:
          default: ssh
          description:
            - This defines the location of the SSH binary. It defaults to V(ssh) which will use the first SSH binary available in $PATH.
            - This option is usually not required, it might be useful when access to system SSH is restricted,
              or when using SSH wrappers to connect to remote hosts.
          type: string
          env: [{name: ANSIBLE_SSH_EXECUTABLE}]
          ini:
          - {key: ssh_executable, section: ssh_connection}
          #const: ANSIBLE_SSH_EXECUTABLE
          version_added: "2.2"
          version_added_collection: ansible.builtin
          vars:
              - name: ansible_ssh_executable
                version_added: '2.7'
                version_added_collection: ansible.builtin
      sftp_executable:
          default: sftp
          description:
            - This defines the location of the sftp binary. It defaults to V(sftp) which will use the first binary available in $PATH.
          type: string
          env: [{name: ANSIBLE_SFTP_EXECUTABLE}]
          ini:
          - {key: sftp_executable, section: ssh_connection}
          version_added: "2.6"
          version_added_collection: ansible.builtin
          vars:
              - name: ansible_sftp_executable
                version_added: '2.7'
                version_added_collection: ansible.builtin
      scp_executable:
          default: scp
          description:
            - This defines the location of the scp binary. It defaults to V(scp) which will use the first binary available in $PATH.
          type: string
          env: [{name: ANSIBLE_SCP_EXECUTABLE}]
          ini:
          - {key: scp_executable, section: ssh_connection}
          version_added: "2.6"
          version_added_collection: ansible.builtin
          vars:
              - name: ansible_scp_executable
                version_added: '2.7'
                version_added_collection: ansible.builtin
      scp_extra_args:
          description: Extra exclusive to the C(scp) CLI
          type: string
          vars:
              - name: ansible_scp_extra_args
          env:
            - name: ANSIBLE_SCP_EXTRA_ARGS
              version_added: '2.7'
              version_added_collection: ansible.builtin
          ini:
            - key: scp_extra_args
              section: ssh_connection
              version_added: '2.7'
              version_added_collection: ansible.builtin
          cli:
            - name: scp_extra_args
          default: ''
      sftp_extra_args:
          description: Extra exclusive to the C(sftp) CLI
          type: string
          vars:
              - name: ansible_sftp_extra_args
          env:
            - name: ANSIBLE_SFTP_EXTRA_ARGS
              version_added: '2.7'
              version_added_collection: ansible.builtin
          ini:
            - key: sftp_extra_args
              section: ssh_connection
              version_added: '2.7'
              version_added_collection: ansible.builtin
          cli:
            - name: sftp_extra_args
          default: ''
      ssh_extra_args:
          description: Extra exclusive to the SSH CLI.
          type: string
          vars:
              - name: ansible_ssh_extra_args
          env:
            - name: ANSIBLE_SSH_EXTRA_ARGS
              version_added: '2.7'
              version_added_collection: ansible.builtin
          ini:
            - key: ssh_extra_args
              section: ssh_connection
              version_added: '2.7'
              version_added_collection: ansible.builtin
          cli:
            - name: ssh_extra_args
          default: ''
      reconnection_retries:
          description:
            - Number of attempts to connect.
            - Ansible retries connections only if it gets an SSH error with a return code of 255.
            - Any errors with return codes other than 255 indicate an issue with program execution.
          default: 0
          type: integer
          env:
            - name: ANSIBLE_SSH_RETRIES
          ini:
            - section: connection
              key: retries
            - section: ssh_connection
              key: retries
          vars:
            - name: ansible_ssh_retries
              version_added: '2.7'
              version_added_collection: ansible.builtin
      port:
          description: Remote port to connect to.
          type: int
          ini:
            - section: defaults
              key: remote_port
          env:
            - name: ANSIBLE_REMOTE_PORT
          vars:
            - name: ansible_port
            - name: ansible_ssh_port
          keyword:
            - name: port
      remote_user:
          description:
              - User name with which to login to the remote server, normally set by the remote_user keyword.
              - If no user is supplied, Ansible will let the SSH client binary choose the user as it normally.
          type: string
          ini:
            - section: defaults
              key: remote_user
          env:
            - name: ANSIBLE_REMOTE_USER
          vars:
            - name: ansible_user
            - name: ansible_ssh_user
          cli:
            - name: user
          keyword:
            - name: remote_user
      pipelining:
          env:
            - name: ANSIBLE_PIPELINING
            - name: ANSIBLE_SSH_PIPELINING
          ini:
            - section: defaults
              key: pipelining
            - section: connection
              key: pipelining
            - section: ssh_connection
              key: pipelining
          vars:
            - name: ansible_pipelining
            - name: ansible_ssh_pipelining
      private_key_file:
          description:
              - Path to private key file to use for authentication.
          type: string
          ini:
            - section: defaults
              key: private_key_file
          env:
            - name: ANSIBLE_PRIVATE_KEY_FILE
          vars:
            - name: ansible_private_key_file
            - name: ansible_ssh_private_key_file
          cli:
            - name: private_key_file
              option: '--private-key'
      private_key:
          description:
            - Private key contents in PEM format. Requires the C(SSH_AGENT) configuration to be enabled.
          type: string
          env:
            - name: ANSIBLE_PRIVATE_KEY
          vars:
            - name: ansible_private_key
            - name: ansible_ssh_private_key
          version_added: '2.19'
          version_added_collection: ansible.builtin
      private_key_passphrase:
          description:
            - Private key passphrase, dependent on O(private_key).
            - This does NOT have any effect when used with O(private_key_file).
          type: string
          env:
            - name: ANSIBLE_PRIVATE_KEY_PASSPHRASE
          vars:
            - name: ansible_private_key_passphrase
            - name: ansible_ssh_private_key_passphrase
          version_added: '2.19'
          version_added_collection: ansible.builtin
      control_path:
        description:
          - This is the location to save SSH's ControlPath sockets, it uses SSH's variable substitution.
          - Since 2.3, if null (default), ansible will generate a unique hash. Use ``%(directory)s`` to indicate where to use the control dir path setting.
          - Before 2.3 it defaulted to ``control_path=%(directory)s/ansible-ssh-%%h-%%p-%%r``.
          - Be aware that this setting is ignored if C(-o ControlPath) is set in ssh args.
        type: string
        env:
          - name: ANSIBLE_SSH_CONTROL_PATH
        ini:
          - key: control_path
            section: ssh_connection
        vars:
          - name: ansible_control_path
            version_added: '2.7'
            version_added_collection: ansible.builtin
      control_path_dir:
        default: ~/.ansible/cp
        description:
          - This sets the directory to use for ssh control path if the control path setting is null.
          - Also, provides the ``%(directory)s`` variable for the control path setting.
        type: string
        env:
          - name: ANSIBLE_SSH_CONTROL_PATH_DIR
        ini:
          - section: ssh_connection
            key: control_path_dir
        vars:
          - name: ansible_control_path_dir
            version_added: '2.7'
            version_added_collection: ansible.builtin
      sftp_batch_mode:
        default: true
        description:
          - When set to C(True), sftp will be run in batch mode, allowing detection of transfer errors.
          - When set to C(False), sftp will not be run in batch mode, preventing detection of transfer errors.
        env: [{name: ANSIBLE_SFTP_BATCH_MODE}]
        ini:
        - {key: sftp_batch_mode, section: ssh_connection}
        type: bool
        vars:
          - name: ansible_sftp_batch_mode
            version_added: '2.7'
            version_added_collection: ansible.builtin
      ssh_transfer_method:
        description: Preferred method to use when transferring files over ssh
        choices:
              sftp: This is the most reliable way to copy things with SSH.
              scp: Deprecated in OpenSSH. For OpenSSH >=9.0 you must add an additional option to enable scp C(scp_extra_args="-O").
              piped: Creates an SSH pipe with C(dd) on either side to copy the data.
              smart: Tries each method in order (sftp > scp > piped), until one succeeds or they all fail.
        default: smart
        type: string
        env: [{name: ANSIBLE_SSH_TRANSFER_METHOD}]
        ini:
            - {key: transfer_method, section: ssh_connection}
        vars:
            - name: ansible_ssh_transfer_method
              version_added: '2.12'
              version_added_collection: ansible.builtin
      use_tty:
        version_added: '2.5'
        version_added_collection: ansible.builtin
        default: true
        description: add -tt to ssh commands to force tty allocation.
        env: [{name: ANSIBLE_SSH_USETTY}]
        ini:
        - {key: usetty, section: ssh_connection}
        type: bool
        vars:
          - name: ansible_ssh_use_tty
            version_added: '2.7'
            version_added_collection: ansible.builtin
      timeout:
        default: 10
        description:
            - This is the default amount of time we will wait while establishing an SSH connection.
            - It also controls how long we can wait to access reading the connection once established (select on the socket).
        env:
            - name: ANSIBLE_TIMEOUT
            - name: ANSIBLE_SSH_TIMEOUT
              version_added: '2.11'
              version_added_collection: ansible.builtin
        ini:
            - key: timeout
              section: defaults
            - key: timeout
              section: ssh_connection
              version_added: '2.11'
              version_added_collection: ansible.builtin
        vars:
          - name: ansible_ssh_timeout
            version_added: '2.11'
            version_added_collection: ansible.builtin
        cli:
          - name: timeout
        type: integer
      pkcs11_provider:
        version_added: '2.12'
        version_added_collection: ansible.builtin
        default: ""
        type: string
        description:
          - "PKCS11 SmartCard provider such as opensc, example: /usr/local/lib/opensc-pkcs11.so"
        env: [{name: ANSIBLE_PKCS11_PROVIDER}]
        ini:
          - {key: pkcs11_provider, section: ssh_connection}
        vars:
          - name: ansible_ssh_pkcs11_provider
      verbosity:
        version_added: '2.19'
        version_added_collection: ansible.builtin
        default: 0
        type: int
        description:
          - Requested verbosity level for the SSH CLI.
        env: [{name: ANSIBLE_SSH_VERBOSITY}]
        ini:
          - {key: verbosity, section: ssh_connection}
        vars:
          - name: ansible_ssh_verbosity
"""

EXAMPLES = r"""
# inventory: CT 129 on node pve1, reached through the node's sshd
# sglang_containers:
#   hosts:
#     ct129:
#       ansible_connection: gpuserve.sglang.pct
#       ansible_host: pve1.example.internal
#       ansible_user: root
#       proxmox_vmid: 129
"""

import shlex
import time

from ansible import constants as C
from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection.ssh import Connection as SshConnection
from ansible.utils.display import Display
from ansible_collections.gpuserve.sglang.plugins.plugin_utils.connection_options import register_ssh_based

display = Display()

NAME = "gpuserve.sglang.pct"
# The two options this plugin adds to ansible.builtin.ssh's, as DOCUMENTATION has them (a unit test keeps them equal).
OWN_OPTIONS = {
    "vmid": {"description": "The container's id on the node (C(pct exec <vmid>)).", "type": "int", "required": True,
             "vars": [{"name": "proxmox_vmid"}]},
    "proxmox_become_method": {"description": "How the node's O(remote_user) runs C(pct) when it is not root.",
                              "type": "str", "default": "sudo", "vars": [{"name": "proxmox_become_method"}]},
}


def register_options(config=None, version=None):
    """This plugin's options given to Ansible's config manager before the loader parses DOCUMENTATION for them, on a
    tested ansible-core only (plugin_utils/connection_options.py says why and how); True when it did."""
    return register_ssh_based(C.config if config is None else config, (__name__, NAME), OWN_OPTIONS, version)


register_options()

# lxc-attach (what pct exec runs, on Proxmox VE and in the lab) first re-executes itself from a sealed memfd -
# LXC's fix of CVE-2019-5736, done before anything is attached or run. Under load that step can fail ("Device or
# resource busy - Failed to rexec as memfd") and lxc-attach then aborts in its error path (glibc "munmap_chunk():
# invalid pointer", SIGABRT), which OpenSSH reports as 255 and paramiko as -1 (its "exit-signal"): the CI flake of
# issue #16 item 8. The command never started, so it is run again - that failure only, a bounded number of times,
# each retry said.
REXEC_FAILED = ("Failed to rexec as memfd", "via memory file descriptor")
REXEC_ATTEMPTS = 4


class Connection(SshConnection):
    """ansible.builtin.ssh to the node, every command wrapped in pct exec <vmid> --."""

    transport = "gpuserve.sglang.pct"
    has_pipelining = True

    def _pct(self, cmd):
        argv = ["/usr/sbin/pct", "exec", str(int(self.get_option("vmid"))), "--"]
        if self.get_option("remote_user") not in (None, "root"):
            argv = [self.get_option("proxmox_become_method")] + argv
        # cmd is the shell string Ansible built for the container (/bin/sh -c '...'); the node's login shell
        # splits it back into pct's argv, as proxmox_pct_remote does
        return " ".join(shlex.quote(a) for a in argv) + " " + cmd

    def exec_command(self, cmd, in_data=None, sudoable=True):
        """Run cmd inside the container; sudoable=False: never a PTY (-tt) around pct exec. lxc-attach's failed
        memfd re-exec (see REXEC_FAILED) is retried; every other result is returned or raised as it came."""
        for attempt in range(1, REXEC_ATTEMPTS + 1):
            try:
                rc, out, err = super(Connection, self).exec_command(self._pct(cmd), in_data=in_data, sudoable=False)
            except AnsibleConnectionFailure as exc:
                if attempt == REXEC_ATTEMPTS or not any(m in to_text(exc) for m in REXEC_FAILED):
                    raise
                said = to_text(exc)
            else:
                if rc == 0 or attempt == REXEC_ATTEMPTS or not any(m in to_text(err) for m in REXEC_FAILED):
                    return rc, out, err
                said = to_text(err)
            display.warning("container %s: lxc-attach could not re-execute itself before starting the command (%s); "
                            "nothing ran, running it again (attempt %d of %d)" % (
                                self.get_option("vmid"), said.strip().splitlines()[-1][:200] if said.strip() else "",
                                attempt + 1, REXEC_ATTEMPTS))
            time.sleep(0.5 * attempt)
        raise AnsibleConnectionFailure("unreachable")   # not reached: the last attempt returns or raises

    def put_file(self, in_path, out_path):
        """The file's bytes on stdin of cat inside the container (never a copy on the node)."""
        display.vvv("PUT %s TO %s" % (in_path, out_path), host=self.get_option("host"))
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as f:
            data = f.read()
        if data:
            rc, out, err = self.exec_command("/bin/sh -c %s" % shlex.quote("cat > %s" % shlex.quote(out_path)),
                                             in_data=data)
        else:
            # an empty file: no stdin at all (ansible.builtin.ssh sends none for empty data, and cat would wait on
            # the open pipe for ever) - create it empty instead
            rc, out, err = self.exec_command("/bin/sh -c %s" % shlex.quote(": > %s" % shlex.quote(out_path)))
        if rc != 0:
            raise AnsibleError("failed to put %s to %s in container %s: %s" % (
                in_path, out_path, self.get_option("vmid"), to_text(err or out).strip()))
        return rc, out, err

    def fetch_file(self, in_path, out_path):
        display.vvv("FETCH %s TO %s" % (in_path, out_path), host=self.get_option("host"))
        rc, out, err = self.exec_command("/bin/sh -c %s" % shlex.quote("cat %s" % shlex.quote(in_path)))
        if rc != 0:
            raise AnsibleError("failed to fetch %s from container %s: %s" % (
                in_path, self.get_option("vmid"), to_text(err or out).strip()))
        with open(to_bytes(out_path, errors="surrogate_or_strict"), "wb") as f:
            f.write(out)
        return rc, out, err
