"""Command line: `python -m harness <command> ...`.

Commands:
  nsys kern-sum|nvtx-kern-sum FILE.sqlite [--format csv|table]   read an nsys SQLite export
  target --op OP --shape SHAPE --impl IMPL ...                     the process nsys captures
  config [FILE [OVERRIDE ...]]                                    validate a config file (overrides merged over it)
  history build [--artifacts DIR] [--out FILE]                    rebuild the SQLite index of every retained namespace
  bundle NAMESPACE [--out FILE] [--include-reports]               one archive of a namespace for a pull request
  compare A B [--out FILE.csv]                                    kernel times of two namespaces, each against its launch spread
  retrust NAMESPACE                                               re-derive a namespace's controls, drift and reports (CPU)
  regroup NAMESPACE [--dry-run]                                   clear the groups measured on more than one GPU, to re-measure them
  verify BUNDLE                                                    check a bundle: hashes, re-derived tables, report figures
                                                                   (exit 0 verified, 1 mismatches, 2 unusable input)

Every failure the user can act on ends with one sentence on stderr and exit status 2.
"""

from __future__ import annotations

import sys

from harness.errors import EvidenceError

USAGE = "usage: python -m harness {nsys,target,config,history,compare,retrust,regroup,bundle,verify} ..."


def main(argv: list[str] | None = None) -> int:
    # Each command imports its own module: the capture target, started under nsys once per
    # measurement group, must not pay for pandas, Jinja2 and matplotlib.
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    command, rest = args[0], args[1:]
    try:
        if command == "nsys":
            from harness.tables import nsys_cli

            return nsys_cli.main(rest)
        if command == "history":
            from harness.tables import history

            return history.main(rest)
        if command == "compare":
            from harness.evidence import compare

            return compare.main(rest)
        if command == "retrust":
            from harness.evidence import retrust

            return retrust.main(rest)
        if command == "regroup":
            from harness.evidence import regroup

            return regroup.main(rest)
        if command in ("bundle", "verify"):
            from harness.evidence import bundle

            return bundle.bundle_main(rest) if command == "bundle" else bundle.main(rest)
        if command == "target":
            from harness.measure import target

            return target.main(rest)
        if command == "config":
            from harness import config

            config.load(*rest) if rest else config.load()
            print("config: valid.")
            return 0
    except EvidenceError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(f"{USAGE}\nunknown command {command!r}.", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
