"""One build step on top of pyproject.toml: the repository's targets/*.toml ship inside the wheel
as the package data ``edgeforge/targets_data/`` (``[tool.setuptools.package-data]`` cannot reach
outside the package, and ``data-files`` is deprecated). An editable install reads targets/ in
place; edgeforge.targets.targets_dir() looks in the package first, then at the repository root."""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithTargets(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "edgeforge" / "targets_data"
        self.mkpath(str(dest))
        for profile in sorted((HERE / "targets").glob("*.toml")):
            self.copy_file(str(profile), str(dest / profile.name))


setup(cmdclass={"build_py": BuildPyWithTargets})
