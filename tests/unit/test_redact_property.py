"""Security round 3 (#58 item 6): the log redactor, over generated lines. It cut a line at 4,096 characters before
redacting (a secret across the cut stayed half visible) and missed ``"api_key": "..."``, ``api-key: ...``,
``--api-key X`` and unquoted values. Every line below carries one secret in one of the spellings a repr, a JSON or
YAML dump, an env listing, a command line (or its repr) or a URL uses, at any position - also straddling the cut -
with random text around it: the secret never comes out of the parser's line reader, nor out of ``redact``."""
import random
import string

import pytest

from unit_helpers import load_module_util

R = load_module_util("logs.rules")
L = load_module_util("logs")

NAMES = ["api_key", "admin_api_key", "API_KEY", "api-key", "admin-api-key", "apiKey", "hf_token", "HF_TOKEN",
         "access-token", "ssl_keyfile_password", "password", "client_secret", "SECRET", "passwd"]
FORMS = [
    "{name}='{v}'", '{name}="{v}"', "{name}={v}", "{name}: {v}", "{name}:{v}", '"{name}": "{v}"', "'{name}': '{v}'",
    '"{name}":"{v}"', "{name} = {v}", "--{name} {v}", "--{name}={v}", "'--{name}', '{v}'", '"--{name}", "{v}"',
    "ServerArgs(model_path='/m', {name}='{v}', port=30000)", "https://user:{v}@mirror.example/x",
    "GET /x?token={v}&y=1", "Authorization: Bearer {v}", "token='{v}'", '"token": "{v}"',
]
FILLER = string.ascii_letters + string.digits + " =:,()[]{}'\"-_./#"


def secret(rng):
    # what a key looks like: letters, digits and the punctuation tokens carry (never a blank, quote or comma)
    return "S" + "".join(rng.choice(string.ascii_letters + string.digits + "._~+/-") for _n in range(rng.randint(8, 40)))


def line_with_secret(rng, at=None):
    v = secret(rng)
    form = rng.choice(FORMS)
    name = rng.choice(NAMES)
    if form.startswith("--") or form.startswith(("'--", '"--')):
        name = name.lower().replace("_", "-")           # a flag is spelt with dashes
    elif name == "access-token":                        # a dashed token name is a flag's; as a field, snake_case
        name = "access_token"
    if "://" in form:                                   # a URL's userinfo holds no raw '/' (RFC 3986: %2F)
        v = v.replace("/", "%2F")
    text = form.format(name=name, v=v)
    before = "".join(rng.choice(FILLER) for _n in range(rng.randint(0, 200) if at is None else at))
    after = "".join(rng.choice(FILLER) for _n in range(rng.randint(0, 200)))
    # keep the secret a word of its own: a blank or a comma on either side, as every printer puts it
    return before + " " + text + ", " + after, v


@pytest.mark.parametrize("seed", range(8))
def test_no_generated_secret_survives_the_redactor_or_the_line_reader(seed):
    rng = random.Random(seed)
    for _n in range(500):
        line, v = line_with_secret(rng)
        assert v not in R.redact(line), (line, R.redact(line))
        assert v not in R._strip(line), line  # pylint: disable=protected-access
        assert R.REDACTED in R.redact(line)


@pytest.mark.parametrize("seed", range(4))
def test_a_secret_across_the_cut_at_4096_characters_is_never_half_shown(seed):
    rng = random.Random(100 + seed)
    for _n in range(200):
        at = R.MAX_LINE - rng.randint(1, 60)           # the secret starts just before the cut and runs across it
        line, v = line_with_secret(rng, at=at)
        out = R._strip(line)  # pylint: disable=protected-access
        assert len(out) <= R.MAX_LINE
        for n in range(6, len(v) + 1):                  # no piece of it of six characters or more
            assert v[:n] not in out, (v, out[-120:])


def test_the_parser_never_returns_a_generated_secret():
    rng = random.Random(7)
    lines, secrets = [], []
    for _n in range(200):
        line, v = line_with_secret(rng)
        lines.append(line)
        secrets.append(v)
    text = "\n".join(lines) + "\nTraceback (most recent call last):\n  File \"x.py\", line 1, in f\nRuntimeError: " \
        + lines[-1] + "\n"
    out = repr(L.parse_log(text))
    assert not [v for v in secrets if v in out]


@pytest.mark.parametrize("line", [
    "[2026-11-20 09:20:01 TP0] Decode batch. #running-req: 1, #token: 45, token usage: 0.00, "
    "max_total_num_tokens=207346, gen throughput (token/s): 31.2",
    "server_args=ServerArgs(tokenizer_path='/m', api_key=None, max_total_tokens=None, api_key_file='/etc/k')",
    "--api-key '' --host 127.0.0.1", "secrets_dir=/srv/x tokens=12 passwords_allowed=3",
    "[2026-11-20 09:20:01 TP0] Prefill batch. #new-seq: 1, #new-token: 8, #cached-token: 0, token usage: 0.00",
])
def test_ordinary_fields_counters_and_empty_keys_stay_readable(line):
    assert R.redact(line) == line
