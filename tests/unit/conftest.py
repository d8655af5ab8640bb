"""Markers of the unit tests (unit_helpers.CONTROLLER)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "controller: needs ansible-core (a plugin or ansible-playbook), so runs only on "
                                       "the controller's Python, not in tests/ci/targets.sh")
