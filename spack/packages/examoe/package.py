# ExaMoE's Spack package. Kokkos-ecosystem conventions (as Kokkos, Kokkos
# Kernels, Cabana and ArborX do it): the Kokkos backend is a variant of this
# package and is required of Kokkos and Kokkos Kernels; under CUDA, cuda_arch
# is passed down to Kokkos, Kokkos provides the nvcc wrapper and CUDA
# lambdas, and the wrapper becomes this build's C++ compiler.

from spack.package import *


class Examoe(CMakePackage, CudaPackage):
    """ExaMoE: pre-training of Mixture-of-Experts transformers the way HPC
    codes run, with a TOML input deck, Kokkos kernels, MPI and parallel HDF5
    checkpoints, on CPU (Serial/OpenMP) and CUDA nodes."""

    # No release archive yet: built from a checkout, with `spack dev-build
    # examoe@develop` run in it or an environment that `spack develop`s it
    # (spack/spack.yaml).
    version("develop")

    variant("openmp", default=False, description="Kokkos OpenMP backend: OpenMP threads per rank")
    variant("nccl", default=False, description="NCCL collectives on device buffers (needs +cuda)")
    variant("tests", default=False, description="Build the test suite (ctest)")
    variant("benchmarks", default=False, description="Build the Google Benchmark programs in bench/")
    variant("sentencepiece", default=False, description="Subword tokenizers in examoe-tokenize (SentencePiece)")
    variant("libsodium", default=False,
            description="Secure aggregation for federated training (federated.secure) on libsodium")
    variant("onednn", default=True,
            description="bf16 matrix products on CPUs through oneDNN (precision.compute); unused by +cuda")

    depends_on("cmake@3.20:", type="build")

    # Kokkos 3.4 or later (3.x and 4.x both build), with this build's backend.
    depends_on("kokkos@3.4:")
    depends_on("kokkos+openmp", when="+openmp")
    depends_on("kokkos+cuda+cuda_lambda+wrapper", when="+cuda")
    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"kokkos+cuda cuda_arch={_arch}", when=f"+cuda cuda_arch={_arch}")
        depends_on(f"nccl+cuda cuda_arch={_arch}", when=f"+nccl cuda_arch={_arch}")
    # Kokkos Kernels pins its own Kokkos version; ask it for the same backend.
    depends_on("kokkos-kernels@3.4:")
    depends_on("kokkos-kernels+serial", when="~openmp~cuda")
    depends_on("kokkos-kernels+openmp", when="+openmp")
    depends_on("kokkos-kernels+cuda", when="+cuda")

    depends_on("mpi")
    # Checkpoints are written collectively through MPI-IO.
    depends_on("hdf5+mpi")
    depends_on("tomlplusplus")
    depends_on("cli11")
    depends_on("fmt")
    depends_on("xxhash")
    depends_on("nlohmann-json")
    depends_on("nccl", when="+nccl")
    depends_on("googletest", when="+tests")
    depends_on("benchmark", when="+benchmarks")
    depends_on("sentencepiece", when="+sentencepiece")
    depends_on("libsodium", when="+libsodium")
    depends_on("onednn cpu_runtime=omp", when="+onednn~cuda")

    conflicts("+nccl", when="~cuda", msg="NCCL collectives need the CUDA backend: add +cuda")
    conflicts("+cuda", when="cuda_arch=none", msg="+cuda needs a GPU architecture, e.g. cuda_arch=80")

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define("Kokkos_ROOT", spec["kokkos"].prefix),
            self.define("KokkosKernels_ROOT", spec["kokkos-kernels"].prefix),
            self.define("HDF5_ROOT", spec["hdf5"].prefix),
            self.define_from_variant("EXAMOE_ENABLE_TESTS", "tests"),
            self.define_from_variant("EXAMOE_ENABLE_BENCHMARKS", "benchmarks"),
            self.define("EXAMOE_ENABLE_SENTENCEPIECE", "ON" if spec.satisfies("+sentencepiece") else "OFF"),
            self.define("EXAMOE_ENABLE_SODIUM", "ON" if spec.satisfies("+libsodium") else "OFF"),
            self.define("EXAMOE_ENABLE_ONEDNN", "ON" if spec.satisfies("+onednn~cuda") else "OFF"),
            self.define_from_variant("EXAMOE_ENABLE_NCCL", "nccl"),
            # An install compiles every source once: batches of 8 share one
            # parse of the Kokkos headers, about half the CPU time.
            self.define("CMAKE_UNITY_BUILD", True),
            self.define("CMAKE_UNITY_BUILD_BATCH_SIZE", 8),
            # Spack's compiler wrappers add the spec's target flags
            # (target=...): no -march of ExaMoE's own on top.
            self.define("EXAMOE_ARCH", ""),
            # The BLAS is the one Spack built Kokkos Kernels against (for
            # +openmp pick ^openblas threads=openmp), not the host's.
            self.define("EXAMOE_OPENMP_BLAS", "OFF"),
        ]
        if spec.satisfies("+cuda"):
            # Kokkos' nvcc wrapper compiles every translation unit (3.x needs it).
            args.append(self.define("CMAKE_CXX_COMPILER", spec["kokkos"].kokkos_cxx))
        return args

    def setup_build_environment(self, env):
        # ExaMoEDependencies.cmake looks for nccl.h and libnccl under $NCCL_ROOT.
        if self.spec.satisfies("+nccl"):
            env.set("NCCL_ROOT", self.spec["nccl"].prefix)
