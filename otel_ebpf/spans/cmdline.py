"""process.command_args with secrets replaced, by the option's name and by the value's shape.

The command line is opt-in (resource_attributes: process.command_args: enabled); when it is
exported, no argument that looks like a credential is. An option name is not enough:
`curl -H 'Authorization: Bearer ...'`, `mysql -pHunter2`, `app sk-...`, `psql postgres://u:p@h`
put the secret in a value whose option says nothing. So every argument is checked for:

- inline program text (`python -c`, `perl -e`, `ruby -e`, `node -e/-p`, `php -r`,
  `sh/bash/... -c`): replaced whole, it is source code that may hold anything;
- the value after an option with a secret-looking name (`--api-key X`, `--x-password=X`),
  and the few programs whose secret options have plain names (`curl -u user:pw`,
  `mysql -pPW`, `redis-cli -a PW`, `sshpass -p PW`);
- `name: value` and `name=value` pairs with a secret-looking name (headers, variables,
  query parameters and JSON keys inside an argument), `Bearer x`, `Basic x`;
- URL credentials (`scheme://user:pass@host`);
- well-known key shapes (sk-..., ghp_..., xox?-..., eyJ... JWTs, AKIA..., AIza..., hf_...,
  glpat-..., PEM private keys);
- long random-looking tokens (see looks_random), which catch the keys nobody named.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter

from otel_ebpf.spans.redact import REDACTED, is_secret_name

# ---------------------------------------------------------------- inline program text

# python, python3, python3.11, python3.13t, pythonw...
PYTHON = re.compile(r"python[\d.]*[a-z]?")
# interpreter options that take a value, the next argument or the rest of this one (-Wignore)
PY_OPTS_WITH_VALUE = frozenset("cmWX")
_SHELL = re.compile(r"(ba|da|z|k|mk|a|fi|tc|c|y)?sh|busybox")
_SHELL_OPTS_WITH_VALUE = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
_PERL_RUBY = re.compile(r"(perl|ruby)[\d.]*")
# perl/ruby switches that take the rest of their cluster as a value (-Ilib, -MPOSIX, -i.bak)
_PERL_OPTS_WITH_VALUE = frozenset("IMmxidDCrF")
_NODE = re.compile(r"node(js)?[\d.]*|bun|deno")
_PHP = re.compile(r"php[\d.]*(-cli)?")
_NODE_OPTS_WITH_VALUE = frozenset({"-r", "--require", "--import", "--loader", "-C",
                                   "--conditions", "--input-type", "--title"})
_PHP_OPTS_WITH_VALUE = frozenset({"-d", "-c", "-z"})


def _python_code(args: list[str]) -> dict[int, str]:
    i = 1
    while i < len(args):
        arg = args[i]
        if arg == "-" or not arg.startswith("-") or arg == "--":
            return {}  # a script, stdin or the end of options: no inline code
        i += 1
        if arg.startswith("--"):
            i += arg == "--check-hash-based-pycs"  # the one long option with a value
            continue
        for j, flag in enumerate(arg[1:], start=1):
            if flag not in PY_OPTS_WITH_VALUE:
                continue
            glued = j < len(arg) - 1
            if flag == "c":  # -c CODE or -cCODE
                if glued:
                    return {i - 1: arg[: j + 1] + REDACTED}
                return {i: REDACTED} if i < len(args) else {}
            if flag == "m":
                return {}
            i += not glued  # -W/-X: their value is the next argument unless glued
            break
    return {}


def _shell_code(args: list[str]) -> dict[int, str]:
    i = 1
    if os.path.basename(args[0]) == "busybox":  # busybox sh -c ..., not busybox wget -c
        if len(args) < 2 or not _SHELL.fullmatch(args[1]) or args[1] == "busybox":
            return {}
        i = 2
    while i < len(args):
        arg = args[i]
        if arg in _SHELL_OPTS_WITH_VALUE:  # -o pipefail, --rcfile FILE: not code
            i += 2
            continue
        if not arg.startswith(("-", "+")) or arg in ("-", "--"):
            return {}
        if not arg.startswith("--") and "c" in arg[1:]:
            return {i + 1: REDACTED} if i + 1 < len(args) else {}
        i += 1
    return {}


def _perl_ruby_code(args: list[str]) -> dict[int, str]:
    out: dict[int, str] = {}
    i = 1
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-") or arg in ("-", "--"):
            break
        for j, flag in enumerate(arg[1:], start=1):
            if flag in "eE":  # every -e is code: perl -e 'a' -e 'b'
                if j < len(arg) - 1:
                    out[i] = arg[: j + 1] + REDACTED
                elif i + 1 < len(args):
                    out[i + 1] = REDACTED
                    i += 1
                break
            if flag in _PERL_OPTS_WITH_VALUE:
                break
        i += 1
    return out


def _flag_code(args: list[str], flags: tuple[str, ...], valued: frozenset[str]
               ) -> dict[int, str]:
    """node -e CODE, --eval=CODE, php -r CODE: an option whose value is code; the
    interpreter's options end at the first other argument (a script, then its own args)."""
    out: dict[int, str] = {}
    i = 1
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-") or arg in ("-", "--"):
            break
        if arg in flags:
            if i + 1 < len(args):
                out[i + 1] = REDACTED
            i += 2
            continue
        name, eq, _ = arg.partition("=")
        if eq and name in flags:
            out[i] = f"{name}={REDACTED}"
        i += 2 if arg in valued else 1
    return out


def inline_code(args: list[str]) -> dict[int, str]:
    """{index: replacement} for the arguments that are program text given inline."""
    if not args:
        return {}
    name = os.path.basename(args[0])
    if PYTHON.fullmatch(name):
        return _python_code(args)
    if _SHELL.fullmatch(name):
        return _shell_code(args)
    if _PERL_RUBY.fullmatch(name):
        return _perl_ruby_code(args)
    if _NODE.fullmatch(name):
        return _flag_code(args, ("-e", "--eval", "-p", "--print"), _NODE_OPTS_WITH_VALUE)
    if _PHP.fullmatch(name):
        return _flag_code(args, ("-r", "-R", "-B", "-E"), _PHP_OPTS_WITH_VALUE)
    return {}


# ---------------------------------------------------------------- program-specific options

_MYSQL = re.compile(r"(mysql|mariadb)[\w-]*")
# program -> options whose value (next argument or glued: -uuser:pw) is a secret though
# their name says nothing; mysql's -p is glued only (`-p` alone prompts, `-p db` names a db)
_PLAIN_SECRET_OPTIONS = {
    "curl": {"-u", "--user", "-U", "--proxy-user", "-b"},
    "redis-cli": {"-a"},
    "sshpass": {"-p"},
}


def _plain_secret_options(program: str) -> tuple[set[str], set[str]]:
    """(options whose value may be the next argument, options whose value may be glued)."""
    if _MYSQL.fullmatch(program):
        return set(), {"-p"}
    options = _PLAIN_SECRET_OPTIONS.get(program, set())
    return options, {o for o in options if len(o) == 2}


# ---------------------------------------------------------------- value shapes

# an option: dashes, name, `=`, the glued value (--api-key=X, -token, --password)
_OPTION = re.compile(r"(-{1,2})([A-Za-z][\w.-]*)(=?)(.*)", re.S)
# `Name: value`, a header as curl -H takes it (also glued, -HName: value): with a secret
# name, the value runs to the end, spaces included (`Authorization: Bearer x`, `Cookie: a=1`)
_HEADER = re.compile(
    r"""(?:^(?:-H|--header=)?|(?<=[\s"'{,;]))(?P<name>[A-Za-z_][\w.-]*):[ \t]*(?=\S)"""
)
# `name=value` and JSON `"name": "value"` inside an argument (variables, query parameters,
# JSON config, `--env=API_KEY=x`): the value ends at a separator unless quoted
_PAIR = re.compile(r"""(?P<name>[A-Za-z_][\w.-]*)["']?(?:\s*=\s*|(?<=["'])\s*:\s*)""")
_VALUE = re.compile(r"""[^\s&;,"'}]*""")
_URL_CREDENTIALS = re.compile(r"([A-Za-z][\w+.-]*://)[^/@\s]+@")
_AUTH_SCHEME = re.compile(r"(?i)\b(bearer\s+)[^\s\"',;]+|\b(basic\s+)[A-Za-z0-9+/=]{8,}")
_KEY_SHAPES = re.compile(
    r"-----BEGIN[A-Z ]*PRIVATE KEY-----.*?(-----END[A-Z ]*PRIVATE KEY-----|$)"
    r"|(?<![A-Za-z0-9])(?:"
    r"sk-[A-Za-z0-9_-]{16,}"  # OpenAI, Anthropic (sk-ant-), DeepSeek...
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}"  # GitHub
    r"|xox[a-z]-[A-Za-z0-9-]{10,}"  # Slack
    r"|eyJ[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*){0,2}"  # JWT (and any base64url JSON)
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}"  # AWS access key ID
    r"|AIza[A-Za-z0-9_-]{30,}"  # Google API key
    r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe
    r"|npm_[A-Za-z0-9]{30,}"  # npm
    r")",
    re.S,
)
# candidates for looks_random: runs of base64/base64url/hex characters
_TOKEN_RUN = re.compile(r"[A-Za-z0-9+/=_-]{20,}")
_HEX = re.compile(r"[0-9a-f]+|[0-9A-F]+")
_DIGEST = re.compile(r"(?:sha1|sha256|sha384|sha512|md5):\Z")  # just before a hex run
_UUID = re.compile(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")

MIN_TOKEN = 20  # shorter runs are words, ports, versions
MIN_HEX_TOKEN = 32  # a 128-bit key in hex; shorter hex runs are ids and short hashes
MIN_ENTROPY = 3.5  # bits per character (random base62 of 20 chars: ~4.0; English words: ~3)
# words per character (random base62: ~0.5, base36: ~0.4; CamelCase or snake_case: < 0.2)
MIN_WORDS_PER_CHAR = 0.25


_SEPARATORS = re.compile(r"[-_+/=]")
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")  # GPT, 2, Head, model


def looks_random(run: str) -> bool:
    """Whether a run of token characters is a key rather than a word, path or number.

    A key is long (MIN_TOKEN, MIN_HEX_TOKEN for hex), has letters and digits, a high
    Shannon entropy per character, and short "words" (separators left out, cut where the
    kind of character changes, a capital starting a word): identifiers are made of words
    (`BertForSequenceClassification2`, `checkpoint_epoch_10_step_2000`, `x86_64-linux-gnu`),
    random text changes kind every two characters or so. UUIDs are identifiers, kept.
    """
    core = run.strip("=-_/+")
    if _UUID.fullmatch(core):
        return False
    if _HEX.fullmatch(core):
        return len(core) >= MIN_HEX_TOKEN and not core.isdigit()
    if len(core) < MIN_TOKEN:
        return False
    alnum = _SEPARATORS.sub("", core)
    if not any(c.isdigit() for c in alnum) or not any(c.isalpha() for c in alnum):
        return False
    counts = Counter(alnum)
    entropy = -sum(n / len(alnum) * math.log2(n / len(alnum)) for n in counts.values())
    words = len(_WORDS.findall(alnum)) / len(alnum)
    return entropy >= MIN_ENTROPY and words >= MIN_WORDS_PER_CHAR


def _random_runs(text: str) -> str:
    def one(m: re.Match) -> str:
        run = m.group(0)
        if _DIGEST.search(text, 0, m.start()) and _HEX.fullmatch(run):
            return run  # image@sha256:<hex>: a content digest, public by design
        if "/" in run and not run.startswith("/") and ("+" in run or run.endswith("=")):
            return REDACTED if looks_random(run) else run  # base64 with its / kept whole
        # a path: judge each segment, /home/u/x stays, /tmp/<token> loses the token
        return "/".join(REDACTED if looks_random(p) else p for p in run.split("/"))

    return _TOKEN_RUN.sub(one, text)


def _redact_pairs(text: str, head: re.Pattern, to_end: bool) -> str:
    """The value after each `head` whose name is secret-looking, replaced. Heads are found
    one after another, so a pair inside a plain one's value is seen (`--env=TOKEN=x`)."""
    out: list[str] = []
    pos = 0
    for m in head.finditer(text):
        if m.start() < pos or not is_secret_name(m.group("name")):
            continue
        start = end = m.end()
        if to_end:
            end, value = len(text), REDACTED
        elif start < len(text) and text[start] in "\"'":
            close = text.find(text[start], start + 1)
            end = len(text) if close < 0 else close + 1
            value = text[start] + REDACTED + text[start]
        else:
            end = _VALUE.match(text, start).end()
            value = REDACTED if end > start else ""  # `password=` says nothing
        out += (text[pos:start], value)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def redact_value(text: str) -> str:
    """An argument (or an option's value) with every secret-shaped part replaced."""
    text = _URL_CREDENTIALS.sub(rf"\1{REDACTED}@", text)
    text = _KEY_SHAPES.sub(REDACTED, text)
    text = _AUTH_SCHEME.sub(lambda m: (m.group(1) or m.group(2)) + REDACTED, text)
    text = _redact_pairs(text, _HEADER, to_end=True)
    text = _redact_pairs(text, _PAIR, to_end=False)
    return _random_runs(text)


def redact_args(args: list[str]) -> list[str]:
    """Command-line arguments with secret values replaced: secrets never leave the host."""
    code = inline_code(args)
    program = os.path.basename(args[0]) if args else ""
    plain, glued = _plain_secret_options(program)
    out: list[str] = []
    hide_next = False
    for i, arg in enumerate(args):
        if i in code:
            out.append(code[i])
            hide_next = False
            continue
        if hide_next:
            out.append(REDACTED)
            # `Authorization:` `Bearer` `x`: the scheme, then its credential
            hide_next = arg.lower() in ("bearer", "basic") and not arg.startswith("-")
            continue
        if i == 0:  # the program itself: a path
            out.append(redact_value(arg))
            continue
        option = _OPTION.fullmatch(arg)
        if option and (is_secret_name(option.group(2)) or "".join(option.group(1, 2)) in plain):
            dashes, name, eq, value = option.groups()
            if eq:
                out.append(f"{dashes}{name}={REDACTED}")
            elif value == "" or dashes == "--":
                hide_next = True
                out.append(arg)
            else:
                out.append(redact_value(arg))  # -name... glued: judge it as a value
            continue
        if arg[:2] in glued and len(arg) > 2 and not arg.startswith("--"):
            out.append(arg[:2] + REDACTED)  # mysql -pPASSWORD, curl -uuser:pw
            continue
        word = arg.strip().rstrip(":").strip("'\"")
        if arg.rstrip().endswith(":") and is_secret_name(word) or word.lower() == "bearer":
            hide_next = True  # `Authorization:` `Bearer` `x` split by an unquoted shell line
            out.append(arg)
            continue
        out.append(redact_value(arg))
    return out
