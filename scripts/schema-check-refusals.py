#!/usr/bin/env python3
"""Lists the valid instances `schema-check --explain` refused, one a line.

  ls | xargs -s 1000000 colibri-coordinator schema-check --vocab V.gguf \\
      --explain > out.jsonl
  scripts/schema-check-refusals.py out.jsonl [--base earlier.jsonl]

Prints, per refused valid test of a compiled case: the case, the test's
index, the byte offset of the first refused token and the text around it
(a '|' at the offset; "end" when the grammar did not accept the text's
end). With --base, also the tests `earlier.jsonl` accepted that are refused
now, the invalid instances accepted (none must be), and the count of each.
"""
import argparse
import json


def load(path):
    cases = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("{"):
                case = json.loads(line)
                cases[case["case"]] = case
    return cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="schema-check --explain output (JSON lines)")
    parser.add_argument("--base", help="an earlier run to compare with")
    args = parser.parse_args()
    cases = load(args.out)
    refused = 0
    invalid_accepted = []
    for name, case in sorted(cases.items()):
        if not case["compiled"]:
            continue
        for i, test in enumerate(case["tests"]):
            if not test["valid"]:
                if test["accepted"]:
                    invalid_accepted.append((name, i))
                continue
            if test["accepted"]:
                continue
            refused += 1
            where = test.get("refused_at")
            near = test.get("near")
            if where is None:
                print(f"{name}\t{i}\t-\t{case['error'] or 'no --explain'}")
            else:
                print(f"{name}\t{i}\t{where}\t{json.dumps(near)}")
    print(f"refused valid instances: {refused}; invalid accepted: {len(invalid_accepted)}")
    for name, i in invalid_accepted:
        print(f"INVALID ACCEPTED\t{name}\t{i}")
    if args.base:
        base = load(args.base)
        lost = []
        for name, case in sorted(cases.items()):
            old = base.get(name)
            if not old or not old["compiled"]:
                continue
            if not case["compiled"]:
                lost.append((name, "no longer compiles: " + (case["error"] or "")))
                continue
            for i, (a, b) in enumerate(zip(old["tests"], case["tests"])):
                if a["valid"] and a["accepted"] and not b["accepted"]:
                    lost.append((name, f"test {i}"))
        print(f"refused now, accepted in {args.base}: {len(lost)}")
        for name, what in lost:
            print(f"LOST\t{name}\t{what}")


if __name__ == "__main__":
    main()
