"""Named checks for the Python tests: each prints PASS or FAIL with its name (and, failing, the
detail), and summary() prints "N passed, M failed" and gives the exit status."""


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"PASS {name}")
        else:
            self.failed += 1
            print(f"FAIL {name}" + (f": {detail}" if detail else ""))
        return ok

    def summary(self):
        """Prints the counts; 1 when anything failed, else 0."""
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0
