"""What the Python tests share: record a failed check, and finish with the
count and the exit status (0, or 1 when anything failed)."""
import sys

failures = []


def check(cond, what):
    """Record `what` as a failure (and print it) unless `cond` holds."""
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def finish():
    print(f"{len(failures)} failures")
    sys.exit(1 if failures else 0)
