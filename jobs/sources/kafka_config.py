"""Kafka client settings from a Java properties file (the format of Kafka tools' `--command-config`).

The file keeps Java client names (security.protocol, sasl.jaas.config, ssl.truststore.location, ...).
`to_librdkafka` maps them to librdkafka's names for confluent-kafka; Spark's own Kafka source takes the
Java names as they are. Values of secret settings must never reach a log line or an error message:
every message built here names keys only, and `redact` (jobs.base.errors) scrubs text that came from elsewhere.
"""
from __future__ import annotations

import re
from pathlib import Path

from jobs.base.errors import BadInput

# Settings offsetlake controls itself: a value in the file would silently change what a snapshot means.
RESERVED = {
    "bootstrap.servers": "give the brokers with --source kafka:HOST:PORT",
    "isolation.level": "use --kafka-isolation",
    "enable.auto.commit": "offsetlake never commits offsets",
    "auto.offset.reset": "offsetlake reads fixed offset ranges",
    "group.instance.id": "offsetlake never joins a group",
}
# Java-only settings with no librdkafka meaning; dropping them changes nothing librdkafka can do.
IGNORED_JAVA = {"ssl.protocol", "ssl.enabled.protocols", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
                "ssl.secure.random.implementation", "ssl.truststore.type", "ssl.keystore.type",
                "default.api.timeout.ms", "request.timeout.ms", "retry.backoff.ms"}
_JAAS_OPTION = re.compile(r'([A-Za-z_][\w.]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


def parse_properties(text: str) -> dict[str, str]:
    """java.util.Properties text: `key=value`, `key: value` or `key value`, `#`/`!` comments,
    backslash line continuations and escapes (\\t, \\n, \\uXXXX, \\=, \\:)."""
    props: dict[str, str] = {}
    logical, pending = [], ""
    for line in text.splitlines():
        line = line.lstrip()  # leading blanks never count, also on continuation lines
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd number of backslashes continues the line
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        key, value = _split(line)
        props[_unescape(key)] = _unescape(value)
    return props


def _split(line: str) -> tuple[str, str]:
    i, n = 0, len(line)
    while i < n and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    key = line[:i]
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def _unescape(text: str) -> str:
    def one(m: re.Match) -> str:
        c = m.group(1)
        if c.startswith("u"):
            return chr(int(c[1:], 16))
        return {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(c, c)

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", one, text)


def read_properties(path: Path) -> dict[str, str]:
    """Parse the file; a missing or unreadable file is a BadInput (naming the path, never a value)."""
    try:
        return parse_properties(path.read_text(encoding="latin-1"))  # Properties.load's default encoding
    except OSError as e:
        raise BadInput(f"--kafka-config {path}: cannot read ({e.strerror or type(e).__name__})") from None


def to_librdkafka(java: dict[str, str], origin: str = "--kafka-config") -> dict[str, str]:
    """Java client settings -> librdkafka settings; Java-only settings are mapped, dropped when harmless,
    or rejected with a BadInput naming the key (librdkafka then validates the rest when the client opens)."""
    out: dict[str, str] = {}
    for key, value in java.items():
        if key in RESERVED:
            raise BadInput(f"{origin}: {key} is set by offsetlake ({RESERVED[key]})")
        if key in IGNORED_JAVA:
            continue
        if key == "sasl.jaas.config":
            out.update(_jaas(value, java.get("sasl.mechanism", "GSSAPI"), origin))
        elif key == "ssl.truststore.location":
            if java.get("ssl.truststore.type", "JKS").upper() != "PEM":
                raise BadInput(f"{origin}: ssl.truststore.location: librdkafka cannot read JKS/PKCS12 trust stores; "
                               "convert it to PEM and set ssl.truststore.type=PEM (or ssl.ca.location)")
            out["ssl.ca.location"] = value
        elif key == "ssl.truststore.password":
            continue  # only protects JKS integrity; a PEM trust store has none
        elif key == "ssl.truststore.certificates":
            out["ssl.ca.pem"] = value
        elif key == "ssl.keystore.location":
            kind = java.get("ssl.keystore.type", "JKS").upper()
            if kind == "PKCS12":
                out["ssl.keystore.location"] = value
            elif kind == "PEM":  # one file holding the key and its certificate chain
                out["ssl.certificate.location"] = value
                out["ssl.key.location"] = value
            else:
                raise BadInput(f"{origin}: ssl.keystore.location: librdkafka cannot read {kind} key stores; "
                               "use ssl.keystore.type=PKCS12 or PEM")
        elif key == "ssl.keystore.password":
            if java.get("ssl.keystore.type", "JKS").upper() == "PKCS12":
                out["ssl.keystore.password"] = value
            else:  # a PEM key file is protected by ssl.key.password, if at all
                continue
        elif key == "ssl.keystore.certificate.chain":
            out["ssl.certificate.pem"] = value
        elif key == "ssl.keystore.key":
            out["ssl.key.pem"] = value
        elif key == "ssl.endpoint.identification.algorithm":
            out[key] = value.lower() if value.strip() else "none"  # Java's "" disables the check
        elif key.endswith(".class") or key.endswith(".classes"):
            raise BadInput(f"{origin}: {key} names a Java class, which librdkafka cannot load")
        else:
            out[key] = value  # same name in both clients (client.id, sasl.mechanism, ...) or librdkafka's own
    return out


def _jaas(value: str, mechanism: str, origin: str) -> dict[str, str]:
    """The login module's options as librdkafka settings (PLAIN/SCRAM, Kerberos keytab, OAuth OIDC)."""
    module = value.strip().split(None, 1)[0] if value.strip() else ""
    opts = {m.group(1): (m.group(2).replace('\\"', '"') if m.group(2) is not None else m.group(3))
            for m in _JAAS_OPTION.finditer(value)}
    name = module.rsplit(".", 1)[-1]
    if name in ("PlainLoginModule", "ScramLoginModule"):
        if "username" not in opts or "password" not in opts:
            raise BadInput(f"{origin}: sasl.jaas.config: {name} needs username and password options")
        return {"sasl.username": opts["username"], "sasl.password": opts["password"]}
    if name == "Krb5LoginModule":
        mapped = {"sasl.kerberos.principal": opts.get("principal"), "sasl.kerberos.keytab": opts.get("keyTab")}
        return {k: v for k, v in mapped.items() if v}
    if name == "OAuthBearerLoginModule" and mechanism.upper() == "OAUTHBEARER" and "clientId" in opts:
        mapped = {"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": opts["clientId"],
                  "sasl.oauthbearer.client.secret": opts.get("clientSecret"), "sasl.oauthbearer.scope": opts.get("scope")}
        return {k: v for k, v in mapped.items() if v}
    raise BadInput(f"{origin}: sasl.jaas.config: login module {name or '(none)'} cannot be mapped to librdkafka; "
                   "use PlainLoginModule, ScramLoginModule, Krb5LoginModule or OAuthBearerLoginModule with clientId")
