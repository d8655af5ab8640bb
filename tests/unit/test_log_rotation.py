"""#47 item 5: the log does not fill the disk. logrotate's copytruncate copies the log to <log>.1 and truncates it in
place (SGLang keeps appending to the same open file); what reads the log - the module's watch of a launch, the
launch's facts on a re-run, sglang_log_facts by marker offset or by default, status.yml and diagnose.yml through
them - still reads the current launch, whether the rotation came in the middle of its start-up or while it served.
The rotation here is copytruncate's own two steps (copy, then truncate in place) on a file held open for appending,
as systemd's StandardOutput=append: holds it; tests/integration/test_logrotate_real.py runs the real logrotate."""
import os
import shutil

from unit_helpers import fixture_text, load_module_util

LOGS = load_module_util("logs")
WATCH = load_module_util("server.watch")
LINES = [line + "\n" for line in fixture_text("sglang_logs", "real_cpu_ready_capped.log").splitlines()]
READY = next(i for i, line in enumerate(LINES) if "ready to roll" in line)
STOPPING = next(i for i, line in enumerate(LINES) if line.startswith("[") and "SIGTERM received" in line)
KV = next(i for i, line in enumerate(LINES) if "KV Cache is allocated" in line)


class Log(object):
    """A log as the unit writes it: one descriptor opened for appending, kept open across rotations."""

    def __init__(self, path):
        self.path = str(path)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)

    def write(self, text):
        os.write(self.fd, text.encode())

    def marker(self, launch_id):
        self.write("# gpuserve launch %s at 2026-12-03 13:01:20 (systemd sglang-t.service)\n" % launch_id)
        return os.path.getsize(self.path)

    def copytruncate(self):
        shutil.copyfile(self.path, self.path + ".1")
        os.truncate(self.path, 0)

    def close(self):
        os.close(self.fd)


def test_a_rotation_in_the_middle_of_a_start_up_loses_nothing_the_watch_reads(tmp_path):
    log = Log(tmp_path / "t.log")
    log.write("an older launch's line\n")
    offset = log.marker("aaaa00000001")
    log.write("".join(LINES[:KV]))
    tail = WATCH._Tail(log.path, offset)            # pylint: disable=protected-access
    assert tail.poll()
    log.write("".join(LINES[KV:KV + 3]))            # written after the watch read, before logrotate copied
    log.copytruncate()
    log.write("".join(LINES[KV + 3:STOPPING]))      # SGLang writes on at the new end of the same open file
    while tail.poll():
        pass
    res = tail.flush()
    log.close()
    assert res["outcome"] == "ready"
    assert res["facts"]["max_total_num_tokens"] == 8192 and res["facts"]["kv_tokens"] == 8192
    assert res["lines"] == STOPPING                  # every line of the launch once: none lost, none twice
    by_default = LOGS.read_facts(path=log.path)      # status.yml's read: the log holds no marker any more
    assert by_default["launch"]["id"] == "aaaa00000001" and by_default["launch"]["rotated"]
    assert by_default["outcome"] == "ready" and by_default["lines"] == STOPPING


def test_a_rotation_the_log_grew_past_again_before_the_watch_looked_is_still_seen(tmp_path):
    """The watch polls every 0.1 s; a log truncated and written past the watch's position between two polls is
    told by the bytes before that position, which are no longer the ones it read."""
    log = Log(tmp_path / "t.log")
    offset = log.marker("aaaa00000011")
    log.write("".join(LINES[:3]))
    tail = WATCH._Tail(log.path, offset)            # pylint: disable=protected-access
    tail.poll()
    log.copytruncate()
    log.write("".join(LINES[3:STOPPING]))            # much longer than what was read before
    while tail.poll():
        pass
    res = tail.flush()
    log.close()
    assert res["outcome"] == "ready" and res["lines"] == STOPPING


def test_a_launch_rotated_while_it_served_is_read_from_the_copy_then_on_in_the_log(tmp_path):
    log = Log(tmp_path / "t.log")
    log.write("".join(LINES[:3]))
    offset = log.marker("bbbb00000002")
    log.write("".join(LINES[:READY + 1]))
    log.copytruncate()
    log.write("".join(LINES[READY + 1:STOPPING]))
    log.close()
    # by the launch record's offset (status.yml, the module's look at a running server)
    res = LOGS.parse_file(log.path, offset)
    assert res["outcome"] == "ready" and res["log_rotated"] and not res["log_truncated"]
    assert res["facts"]["max_total_num_tokens"] == 8192
    assert res["lines"] == STOPPING
    # by default (sglang_log_facts without since): the last launch is the copy's last
    launch = LOGS.last_launch(log.path)
    assert (launch["id"], launch["offset"], launch["rotated"]) == ("bbbb00000002", offset, True)
    facts = LOGS.read_facts(path=log.path)
    assert facts["outcome"] == "ready" and facts["launch"]["id"] == "bbbb00000002" and not facts["stale"]
    assert LOGS.read_facts(path=log.path, since=str(offset))["facts"]["kv_tokens"] == 8192
    # the module's facts of a running server (launch_facts reads through the same tail)
    assert WATCH.launch_facts({"log_path": log.path, "log_offset": offset})["max_total_num_tokens"] == 8192


def test_a_launch_after_the_rotation_is_read_from_the_log_alone(tmp_path):
    log = Log(tmp_path / "t.log")
    log.marker("cccc00000003")
    log.write("".join(LINES[:STOPPING]))
    log.copytruncate()
    offset = log.marker("dddd00000004")
    log.write("".join(LINES[:KV]))
    log.close()
    launch = LOGS.last_launch(log.path)
    assert launch["id"] == "dddd00000004" and "rotated" not in launch
    res = LOGS.parse_file(log.path, offset)
    assert res["outcome"] != "ready" and not res["log_rotated"] and res["lines"] == KV


def test_a_failed_launch_before_the_rotation_is_read_up_to_the_next_launch_in_the_copy(tmp_path):
    """status.yml reads the failed launch the last good configuration was put back after (restored_after: its
    offset and the next launch's): both may have been copied away by the same rotation."""
    failed = fixture_text("sglang_logs", "real_cpu_kv_pool_oom_capped.log")
    log = Log(tmp_path / "t.log")
    first = log.marker("eeee00000005")
    log.write(failed if failed.endswith("\n") else failed + "\n")
    second = log.marker("ffff00000006")
    log.write("".join(LINES[:READY + 1]))
    log.copytruncate()
    log.write("".join(LINES[READY + 1:STOPPING]))
    log.close()
    res = LOGS.parse_file(log.path, first, until=second)
    assert res["outcome"] == "failed" and res["failure"]["kind"] == "kv_pool_oom" and res["log_rotated"]
    assert LOGS.parse_file(log.path, second)["outcome"] == "ready"


def test_a_log_replaced_without_a_copy_is_read_from_its_start_and_says_so(tmp_path):
    log = Log(tmp_path / "t.log")
    log.write("".join(LINES[:STOPPING]))
    offset = log.marker("abab00000007")
    log.write("".join(LINES[:STOPPING]))
    os.truncate(log.path, 0)                         # truncated, and no <log>.1 that holds the launch
    log.write("".join(LINES[READY:STOPPING]))        # shorter than the launch's offset
    log.close()
    res = LOGS.parse_file(log.path, offset)
    assert res["log_truncated"] and not res["log_rotated"] and res["lines"] == STOPPING - READY
    tail = WATCH._Tail(log.path, offset)            # pylint: disable=protected-access
    tail.poll()
    assert tail.flush()["lines"] == STOPPING - READY


def test_an_offset_that_is_no_marker_is_read_from_there_as_before(tmp_path):
    path = tmp_path / "t.log"
    path.write_text("".join(LINES[:STOPPING]))
    (tmp_path / "t.log.1").write_text("# gpuserve launch 0123456789ab at 2026-12-03 13:00:00\n" * 40)
    res = LOGS.parse_file(str(path), 100)
    assert not res["log_rotated"] and not res["log_truncated"] and res["outcome"] == "ready"


def test_a_launch_rotated_twice_while_it_served_is_read_from_the_compressed_copy_that_holds_its_start(tmp_path):
    """Daily rotations go on while a server serves: its marker ends up in <log>.2.gz, <log>.3.gz ... The launch is
    read from the copy that holds its marker, then on in the log (the copies between hold its serving lines)."""
    import gzip  # pylint: disable=import-outside-toplevel
    log = Log(tmp_path / "t.log")
    offset = log.marker("cdcd00000008")
    log.write("".join(LINES[:READY + 1]))
    log.copytruncate()                                       # first rotation: the start-up is in <log>.1
    log.write("[2026-12-03 13:02:00] Decode batch. #running-req: 1, #token: 64, token usage: 0.00\n" * 30)
    with open(log.path + ".1", "rb") as src, gzip.open(log.path + ".2.gz", "wb") as dst:
        dst.write(src.read())                                # logrotate moves .1 on to .2.gz (delaycompress)
    log.copytruncate()                                       # second rotation: <log>.1 holds only serving lines
    log.write("".join(LINES[READY + 1:STOPPING]))
    log.close()
    launch = LOGS.last_launch(log.path)
    assert (launch["id"], launch["offset"], launch["copy"]) == ("cdcd00000008", offset, log.path + ".2.gz")
    res = LOGS.parse_file(log.path, offset)
    assert res["outcome"] == "ready" and res["log_rotated"] and res["facts"]["max_total_num_tokens"] == 8192
    assert LOGS.read_facts(path=log.path)["launch"]["id"] == "cdcd00000008"
    assert WATCH.launch_facts({"log_path": log.path, "log_offset": offset})["kv_tokens"] == 8192


def test_a_copy_is_read_only_up_to_the_launchs_ready_and_the_log_whole(tmp_path):
    """With rotations going on, the copies hold up to sglang_server_log_keep x the size of serving lines: a copy is
    left once the launch is ready (status.yml and every re-run's look read it), the log itself is read whole (a
    failure after ready is there)."""
    log = Log(tmp_path / "t.log")
    offset = log.marker("efef00000009")
    log.write("".join(LINES[:READY + 1]))
    log.write("[2026-12-03 13:02:00] Decode batch. #running-req: 1, #token: 64, token usage: 0.00\n" * 5000)
    log.copytruncate()
    log.write("".join(LINES[READY + 1:STOPPING]))
    log.close()
    res = LOGS.parse_file(log.path, offset)
    assert res["outcome"] == "ready" and res["lines"] == STOPPING        # none of the 5000 serving lines
    tail = WATCH._Tail(log.path, offset)            # pylint: disable=protected-access
    assert tail.poll()
    assert tail.flush()["lines"] == STOPPING
