#!/usr/bin/python3
# Validator for tests/e2e/test_serve_structured.cpp: checks model outputs against the JSON
# schemas they were constrained by, with Debian's python3-jsonschema (a validator independent
# of pagoda's own schema -> grammar converter).
#
# Usage: validate_json_schema.py IN.jsonl
#   IN.jsonl: one object per line, {"id": ..., "schema": {...}, "output": "<the model's text>"}.
# Prints one JSON object per line on stdout:
#   first  {"formats_active": [...], "formats_inactive": [...]}   (the formats the checker knows)
#   then   {"id": ..., "valid": bool, "error": "...", "unchecked_formats": [...],
#           "duplicate_keys": bool} per input line (duplicates: the last value is validated).
# "valid" is false when the output is not JSON or does not validate. Formats whose checker is
# missing (jsonschema checks some only with optional packages) are listed in "unchecked_formats"
# for that line instead of being silently accepted. Exit status 0 unless the input is unreadable
# (2) or jsonschema is missing (3).
import copy
import json
import re
import sys

try:
    import jsonschema
    from jsonschema import validators
except ImportError as e:  # the C++ test checks this first; this is for people running it by hand
    print("jsonschema is missing: " + str(e), file=sys.stderr)
    sys.exit(3)

# Formats pagoda's converter generates and this test asks for.
FORMATS = ["date", "time", "date-time", "email", "uuid", "uri", "ipv4", "hostname"]

# RFC 3339 full-time and date-time (section 5.6), for when jsonschema's own checkers are absent
# (they need the optional rfc3339-validator package). Strict: hours 00-23, minutes 00-59,
# seconds 00-60 (leap second), a numeric offset or Z, the date part a real calendar day.
_TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
_DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"


def _real_date(s):
    import datetime
    try:
        datetime.date(int(s[0:4]), int(s[5:7]), int(s[8:10]))
        return True
    except ValueError:
        return False


def check_time(instance):
    if not isinstance(instance, str):
        return True
    return re.fullmatch(_TIME, instance, re.ASCII) is not None


def check_date_time(instance):
    if not isinstance(instance, str):
        return True
    m = re.fullmatch("(" + _DATE + ")[Tt]" + _TIME, instance, re.ASCII)
    return m is not None and _real_date(m.group(1))


def format_checker_for(cls):
    base = getattr(cls, "FORMAT_CHECKER", None) or jsonschema.FormatChecker()
    checker = copy.copy(base)
    checker.checkers = dict(base.checkers)  # checks() below must not touch the shared one
    if "time" not in checker.checkers:
        checker.checks("time")(check_time)
    if "date-time" not in checker.checkers:
        checker.checks("date-time")(check_date_time)
    return checker


def formats_in(schema, out):
    if isinstance(schema, dict):
        f = schema.get("format")
        if isinstance(f, str):
            out.add(f)
        for v in schema.values():
            formats_in(v, out)
    elif isinstance(schema, list):
        for v in schema:
            formats_in(v, out)
    return out


class _Parse:
    duplicate_keys = False


def _note_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        _Parse.duplicate_keys = True
    return dict(pairs)  # the last one wins, as in json.loads and JavaScript's JSON.parse


def _no_constants(name):
    raise ValueError(name + " is not JSON")


def parse_strict(text):
    """JSON as RFC 8259 has it (no NaN/Infinity); notes duplicate object keys, which RFC 8259
    allows (names SHOULD be unique) and a grammar cannot exclude where keys are free."""
    _Parse.duplicate_keys = False
    return json.loads(text, object_pairs_hook=_note_duplicates, parse_constant=_no_constants)


def main():
    if len(sys.argv) != 2:
        print("usage: validate_json_schema.py IN.jsonl", file=sys.stderr)
        return 2
    try:
        lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
    except OSError as e:
        print(str(e), file=sys.stderr)
        return 2
    default_cls = validators.validator_for({})
    active = sorted(f for f in FORMATS if f in format_checker_for(default_cls).checkers)
    print(json.dumps({"formats_active": active,
                      "formats_inactive": sorted(set(FORMATS) - set(active))}))
    for line in lines:
        if not line.strip():
            continue
        item = json.loads(line)
        schema = item["schema"]
        result = {"id": item.get("id"), "valid": False, "error": "", "unchecked_formats": [],
                  "duplicate_keys": False}
        try:
            instance = parse_strict(item["output"])
            result["duplicate_keys"] = _Parse.duplicate_keys
        except (ValueError, TypeError) as e:
            result["error"] = "not JSON: " + str(e)
            print(json.dumps(result))
            continue
        try:
            cls = validators.validator_for(schema, default=default_cls)
            cls.check_schema(schema)
            checker = format_checker_for(cls)
            errors = sorted(cls(schema, format_checker=checker).iter_errors(instance),
                            key=lambda e: list(e.absolute_path))
            if errors:
                e = errors[0]
                result["error"] = "at %s: %s" % ("/".join(str(p) for p in e.absolute_path), e.message)
            else:
                result["valid"] = True
            result["unchecked_formats"] = sorted(f for f in formats_in(schema, set())
                                                 if f not in checker.checkers)
        except Exception as e:  # a bad schema or a validator crash is a failure, not a pass
            result["error"] = "validator: %s: %s" % (type(e).__name__, e)
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
