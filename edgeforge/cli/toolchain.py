"""The ``toolchain`` verb.

    edgeforge toolchain install lite [--python PATH]   # Paddle Lite in its own Python 3.10 venv
    edgeforge toolchain install web                    # onnxruntime-web (npm), pinned by digest
    edgeforge toolchain list                           # what is installed, with versions
"""
from __future__ import annotations

import json

from ..errors import ConfigError, ExitCode


def register(sub) -> None:
    t = sub.add_parser("toolchain", help="install or list managed toolchains (Paddle Lite in Python 3.10, "
                                          "onnxruntime-web)")
    tsub = t.add_subparsers(dest="toolchain_action", metavar="ACTION", parser_class=type(t))
    tsub.required = True
    inst = tsub.add_parser("install", help="create a toolchain's environment under the edgeforge cache")
    inst.add_argument("name", choices=["lite", "web"], help="lite: paddlelite 2.13rc0 in a Python 3.10 venv; "
                      "web: onnxruntime-web from npm, checked by its sha512")
    inst.add_argument("--python", metavar="PATH",
                      help="the Python 3.10 to build it from (default: python3.10 on PATH, then pyenv)")
    inst.add_argument("--if-missing", action="store_true",
                      help="do nothing when the toolchain is already usable (make runs this)")
    inst.set_defaults(func=cmd_install)
    ls = tsub.add_parser("list", help="the toolchains and their versions")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_list)


def cmd_install(args) -> int:
    from ..toolchain import find_lite, install_lite

    if args.name == "web":
        return install_web(args)
    if args.name != "lite":   # argparse's choices already say so; kept for library callers
        raise ConfigError(f"unknown toolchain '{args.name}'")
    have = find_lite()
    if args.if_missing and have is not None:
        print(f"lite: Python {have.python_version}, paddlelite {have.paddlelite} already usable ({have.python})")
        return ExitCode.OK
    man = install_lite(args.python, log=lambda m: print(m, flush=True))
    pk = man["packages"]
    print(f"installed lite: Python {man['python']}, paddlelite {pk['paddlelite']}, numpy {pk['numpy']}, "
          f"onnxruntime {pk['onnxruntime']}")
    print(f"  {man['python_executable']}")
    return ExitCode.OK


def install_web(args) -> int:
    from ..toolchain_web import find_web, install_web as install

    have = find_web(check=True)
    if args.if_missing and have is not None:
        print(f"web: onnxruntime-web {have.version} already usable ({have.root})")
        return ExitCode.OK
    man = install(log=lambda m: print(m, flush=True))
    print(f"installed web: onnxruntime-web {man['version']} ({man['integrity'][:20]}… checked)")
    print(f"  {package_path()}")
    return ExitCode.OK


def package_path() -> str:
    from ..toolchain_web import package_dir

    return str(package_dir())


def cmd_list(args) -> int:
    from ..toolchain import list_toolchains
    from ..toolchain_web import list_row

    rows = list_toolchains() + [list_row()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return ExitCode.OK
    for r in rows:
        if r["name"] == "web" and r["installed"]:
            print(f"{'web':<6} onnxruntime-web {r['version']} [{r['source']}]")
            print(f"       {r['path']}")
            continue
        if not r["installed"]:
            print(f"{r['name']:<6} not installed (edgeforge toolchain install {r['name']})")
            continue
        print(f"{r['name']:<6} Python {r['python']}, paddlelite {r['paddlelite']}, numpy {r['numpy']}, "
              f"onnxruntime {r['onnxruntime']} [{r['source']}]")
        print(f"       {r['path']}")
    return ExitCode.OK

