"""scripts/trim_wheels.py on a made-up wheelhouse: the wheels not loaded on the GPU machine go, the
SQLAlchemy wheel loses its compiled extensions, its test suite and its dialects but SQLite's, the
Snakemake wheel its HTML report's assets and the PuLP wheel the solvers of other machines, with
their RECORD lines; the rest is left alone."""

from __future__ import annotations

import zipfile
from pathlib import Path

from script_module import load_script


def wheel(path: Path, members: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in members.items():
            z.writestr(name, text)
    return path


def test_a_wheelhouse_is_trimmed_once(tmp_path: Path) -> None:
    trim = load_script("trim_wheels")
    record = ("sqlalchemy/__init__.py,sha256=a,1\nsqlalchemy/cyextension/util.cpython-312-x86_64-linux-gnu.so,sha256=b,2\n"
              "sqlalchemy/dialects/postgresql/base.py,sha256=c,3\nsqlalchemy/dialects/sqlite/base.py,sha256=d,4\n")
    sa = wheel(tmp_path / "sqlalchemy-2.0.58-cp312-cp312-manylinux2014_x86_64.whl",
               {"sqlalchemy/__init__.py": "x", "sqlalchemy/cyextension/util.cpython-312-x86_64-linux-gnu.so": "bin",
                "sqlalchemy/cyextension/util.pyx": "src", "sqlalchemy/testing/fixtures.py": "",
                "sqlalchemy/dialects/__init__.py": "", "sqlalchemy/dialects/_typing.py": "",
                "sqlalchemy/dialects/postgresql/base.py": "", "sqlalchemy/dialects/sqlite/base.py": "",
                "sqlalchemy-2.0.58.dist-info/RECORD": record})
    wheel(tmp_path / "tzdata-2026.6-py2.py3-none-any.whl", {"tzdata/__init__.py": ""})
    wheel(tmp_path / "docutils-0.22.4-py3-none-any.whl", {"docutils/__init__.py": ""})
    wheel(tmp_path / "gitpython-3.2.1-py3-none-any.whl", {"git/__init__.py": ""})
    smk = wheel(tmp_path / "snakemake-9.27.1-py3-none-any.whl",
                {"snakemake/__init__.py": "", "snakemake/assets/__init__.py": "", "snakemake/assets/data/vega/vega.js": "js"})
    wheel(tmp_path / "greenlet-3.5.6-cp312-cp312-manylinux_2_24_x86_64.whl", {"greenlet/__init__.py": ""})
    pulp = wheel(tmp_path / "pulp-3.3.2-py3-none-any.whl",
                 {"pulp/__init__.py": "", "pulp/solverdir/cbc/linux/i64/cbc": "elf", "pulp/solverdir/cbc/linux/arm64/cbc": "elf",
                  "pulp/solverdir/cbc/win/i64/cbc.exe": "pe", "pulp-3.3.2.dist-info/RECORD":
                  "pulp/__init__.py,,\npulp/solverdir/cbc/linux/i64/cbc,,\npulp/solverdir/cbc/win/i64/cbc.exe,,\n"})
    kept = wheel(tmp_path / "sqlite_utils-4.2.1-py3-none-any.whl", {"sqlite_utils/__init__.py": ""})
    before = kept.read_bytes()
    done = trim.trim(tmp_path)
    assert len(done) == 7 and sorted(p.name for p in tmp_path.glob("*.whl")) == [pulp.name, smk.name, sa.name, kept.name]
    with zipfile.ZipFile(sa) as z:
        assert sorted(z.namelist()) == ["sqlalchemy-2.0.58.dist-info/RECORD", "sqlalchemy/__init__.py",
                                        "sqlalchemy/cyextension/util.pyx", "sqlalchemy/dialects/__init__.py",
                                        "sqlalchemy/dialects/_typing.py", "sqlalchemy/dialects/sqlite/base.py"]
        assert z.read("sqlalchemy-2.0.58.dist-info/RECORD").decode() == (
            "sqlalchemy/__init__.py,sha256=a,1\nsqlalchemy/dialects/sqlite/base.py,sha256=d,4\n")
    with zipfile.ZipFile(smk) as z:  # the report's assets go, the module that finds them stays
        assert sorted(z.namelist()) == ["snakemake/__init__.py", "snakemake/assets/__init__.py"]
    with zipfile.ZipFile(pulp) as z:  # the solver the GPU machine (x86-64 Linux) runs stays
        assert sorted(z.namelist()) == ["pulp-3.3.2.dist-info/RECORD", "pulp/__init__.py", "pulp/solverdir/cbc/linux/i64/cbc"]
        assert z.read("pulp-3.3.2.dist-info/RECORD").decode() == "pulp/__init__.py,,\npulp/solverdir/cbc/linux/i64/cbc,,\n"
    assert kept.read_bytes() == before
    assert trim.trim(tmp_path) == []
