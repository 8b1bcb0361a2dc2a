"""No shell command is ever built from config strings (issue #7): every subprocess in the harness
and the workflow takes an argument list, and no rule has a shell: directive."""

from __future__ import annotations

import ast

from harness import ROOT

SOURCES = [*ROOT.glob("harness/**/*.py"), *ROOT.glob("workflow/scripts/*.py"), *ROOT.glob("scripts/*.py")]


def test_no_shell_true_os_system_or_popen() -> None:
    offenders = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func)
                if name in ("os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput"):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
                for kw in node.keywords:
                    if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} shell=")
    assert SOURCES and not offenders, offenders


def test_no_rule_runs_a_shell_string() -> None:
    rules = [*ROOT.glob("workflow/rules/*.smk"), ROOT / "Snakefile"]
    with_shell = [str(p.relative_to(ROOT)) for p in rules if any(line.strip() == "shell:" for line in p.read_text().splitlines())]
    assert not with_shell, with_shell
