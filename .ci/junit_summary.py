# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read the JUnit XML files and step log that `make test` leaves in tests/output.

Two commands:

``summary JUNIT_DIR STEPS_FILE``
    Print one line per step (pass/fail, seconds, test counts from its JUnit
    files), every skipped test case with its reason, every failed one, and a
    closing ``summary: N passed, N failed, N skipped`` line. A step that writes
    no JUnit file (ansible-lint) counts as one test case. Exit 1 if anything
    failed.

``require-ran JUNIT_DIR NAME...``
    Exit 1, naming them, if any of the named ansible-test sanity tests was
    skipped ("No tests applicable", a missing tool) or has no result at all.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import xml.etree.ElementTree as ET


@dataclasses.dataclass
class Counts:
    """Outcome counts of a set of test cases."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0

    def add(self, other: Counts) -> None:
        self.passed += other.passed
        self.failed += other.failed
        self.skipped += other.skipped


@dataclasses.dataclass
class Case:
    """One JUnit test case."""

    name: str
    outcome: str  # passed, failed or skipped
    reason: str


def read_cases(path: str) -> list[Case]:
    cases = []
    for case in ET.parse(path).getroot().iter('testcase'):
        name = '%s::%s' % (case.get('classname', ''), case.get('name', ''))
        outcome, reason = 'passed', ''
        for child in case:
            if child.tag in ('failure', 'error'):
                outcome, reason = 'failed', (child.get('message') or child.text or '').strip()
            elif child.tag == 'skipped' and outcome == 'passed':
                outcome, reason = 'skipped', (child.get('message') or child.text or '').strip()
        cases.append(Case(name, outcome, reason))
    return cases


def count(cases: list[Case]) -> Counts:
    return Counts(
        passed=sum(case.outcome == 'passed' for case in cases),
        failed=sum(case.outcome == 'failed' for case in cases),
        skipped=sum(case.outcome == 'skipped' for case in cases),
    )


def step_cases(junit_dir: str, step: str) -> list[Case]:
    """Cases of every JUnit file of one step (files are named STEP*.xml)."""
    cases: list[Case] = []
    if not os.path.isdir(junit_dir):
        return cases
    for name in sorted(os.listdir(junit_dir)):
        if name.startswith(step) and name.endswith('.xml'):
            cases.extend(read_cases(os.path.join(junit_dir, name)))
    return cases


def first_line(text: str) -> str:
    return text.splitlines()[0][:160] if text else ''


def summary(junit_dir: str, steps_file: str) -> int:
    total = Counts()
    failed_steps = []
    notes = []
    print('\n==================== make test: summary ====================')
    with open(steps_file, encoding='utf-8') as steps:
        for line in steps:
            step, status, seconds = line.split()
            cases = step_cases(junit_dir, step)
            counts = count(cases) if cases else Counts(passed=int(status == '0'), failed=int(status != '0'))
            if status != '0' and counts.failed == 0:
                counts.failed = 1  # the step failed before or outside its test cases
            total.add(counts)
            verdict = 'PASS' if status == '0' else 'FAIL'
            if status != '0':
                failed_steps.append(step)
            print('%-12s %s %6ss  %d passed, %d failed, %d skipped' % (
                step, verdict, seconds, counts.passed, counts.failed, counts.skipped))
            notes.extend('  %s %s: %s' % (case.outcome, case.name, first_line(case.reason))
                         for case in cases if case.outcome != 'passed')
    if notes:
        print('not passed:')
        print('\n'.join(notes))
    if failed_steps:
        print('FAILED steps: %s (their output is above)' % ' '.join(failed_steps))
    print('summary: %d passed, %d failed, %d skipped' % (total.passed, total.failed, total.skipped))
    return 1 if failed_steps or total.failed else 0


def require_ran(junit_dir: str, names: list[str]) -> int:
    outcomes = {}
    for name in sorted(os.listdir(junit_dir)):
        if name.startswith('ansible-test-sanity-') and name.endswith('.xml'):
            for case in read_cases(os.path.join(junit_dir, name)):
                test = case.name.split('::', 1)[1]
                outcomes[test.rsplit('-python-', 1)[0]] = case
    problems = []
    for test in names:
        case = outcomes.get(test)
        if case is None:
            problems.append('%s: no result' % test)
        elif case.outcome == 'skipped':
            problems.append('%s: skipped (%s)' % (test, first_line(case.reason)))
    for problem in problems:
        print('sanity test did not run: %s' % problem)
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == 'summary':
        return summary(argv[1], argv[2])
    if len(argv) >= 3 and argv[0] == 'require-ran':
        return require_ran(argv[1], argv[2:])
    sys.stderr.write(__doc__ or '')
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
