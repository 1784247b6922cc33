# toml++ for ExaMoE's Spack repository: the Spack versions ExaMoE targets
# (0.21-0.23) have no package for it. Header-only; its CMake build installs
# the headers and the tomlplusplus CMake package ExaMoE finds.

from spack.package import *


class Tomlplusplus(CMakePackage):
    """toml++: a header-only TOML v1.0 parser and serializer for C++17."""

    homepage = "https://marzer.github.io/tomlplusplus/"
    url = "https://github.com/marzer/tomlplusplus/archive/refs/tags/v3.4.0.tar.gz"

    license("MIT")

    # The checksum Spack's own later recipe publishes for this release.
    version("3.4.0", sha256="8517f65938a4faae9ccf8ebb36631a38c1cadfb5efa85d9a72e15b9e97d25155")

    depends_on("cmake@3.14:", type="build")

    def cmake_args(self):
        # Only the headers and the CMake package: no tests or examples to build.
        return [self.define("BUILD_TESTING", False), self.define("BUILD_EXAMPLES", False)]
