"""Command line: `python -m harness <command> ...`.

Commands:
  nsys kern-sum|nvtx-kern-sum FILE.sqlite [--format csv|table]   read an nsys SQLite export
  group PLAN.json                                                  a measurement group's process (the measure step starts it)
  config [FILE [OVERRIDE ...]]                                    validate a config file (overrides merged over it)
  history build [--artifacts DIR] [--out FILE] [--force]          rebuild the SQLite index of every retained namespace
  bundle NAMESPACE [--out FILE] [--force] [--include-reports]     one archive of a namespace for a pull request
  compare A B [--margin M] [--out FILE.csv] [--force]             two namespaces kernel by kernel: same, faster, slower or can't tell
  retrust NAMESPACE                                               re-derive a namespace's controls, drift, targets, reports (CPU)
  rerender NAMESPACE ... | --all                                  render reports again from their own tables (CPU)
  regroup NAMESPACE [--dry-run]                                   clear the groups measured on more than one GPU, to re-measure them
  job-times NAMESPACE                                              where a run's time went (writes tables/job_times.csv)
  between-runs NAMESPACE ...                                       the between-run component of the ratios' intervals, for the config
  targets NAMESPACE [--configfile FILE ...] [--strict]            judge a namespace's tables against the config's targets
                                                                   (--strict: exit 1 unless every one is met)
  verify BUNDLE                                                    check a bundle: hashes, re-derived tables, report figures
                                                                   (exit 0 verified, 1 mismatches, 2 unusable input)

Every failure the user can act on ends with one sentence on stderr and exit status 2; Ctrl-C ends a
command with one line and exit status 130. No --out replaces a file under artifacts/, report/,
kernels/, harness/ or workflow/, or the config, and none replaces an existing file without --force.
"""

from __future__ import annotations

import sys

from harness.errors import EvidenceError, shown

USAGE = ("usage: python -m harness {nsys,group,config,history,compare,retrust,rerender,regroup,bundle,verify,targets,"
         "job-times,between-runs} ...")


def main(argv: list[str] | None = None) -> int:
    # Each command imports its own module: the group process, started under nsys once per
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
        if command == "rerender":
            from harness.evidence import rerender

            return rerender.main(rest)
        if command == "regroup":
            from harness.evidence import regroup

            return regroup.main(rest)
        if command == "bundle":
            from harness.evidence import bundle

            return bundle.bundle_main(rest)
        if command == "verify":
            from harness.evidence import verify

            return verify.main(rest)
        if command == "targets":
            from harness.evidence import targets

            return targets.main(rest)
        if command == "job-times":
            from harness.tables import job_times

            return job_times.main(rest)
        if command == "between-runs":
            from harness.evidence import between_runs

            return between_runs.main(rest)
        if command == "group":
            from harness.measure import group

            return group.main(rest)
        if command == "config":
            return _config(rest)
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback; what was being written was removed on the way out
        print(f"{shown(command, 40)}: interrupted (Ctrl-C) before it finished; nothing it was writing was kept.",
              file=sys.stderr)
        return 130
    except EvidenceError as exc:  # control characters of a name in the sentence escaped, whoever wrote it
        print(shown(str(exc), 100_000), file=sys.stderr)
        return 2
    except OSError as exc:  # an --out that is a folder or not writable, an input that cannot be read
        where = f" {shown(exc.filename)}" if exc.filename else ""
        print(f"{command}: cannot use{where}: {exc.strerror or exc}.", file=sys.stderr)
        return 2
    print(f"{USAGE}\nunknown command {shown(command, 40)!r}.", file=sys.stderr)
    return 2


def _config(rest: list[str]) -> int:
    """`config [FILE [OVERRIDE ...]]`: what a run would refuse of the config, refused here too: the
    schema and the semantic checks, and the checks the workflow makes against the checkout (the
    namespace it resolves to, and `trust.earlier` naming a retained namespace)."""
    from harness import ROOT, config
    from harness.tables import trust

    cfg = config.load(*rest) if rest else config.load()
    ns = config.resolve_namespace(cfg, ROOT)
    trust.check_earlier(ROOT / "artifacts", ns, cfg["trust"]["earlier"])
    print("config: valid.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
