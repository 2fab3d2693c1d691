#!/usr/bin/env bash
# make_dist.sh — `make dist`: the relocatable release of lstmd for nodes where nothing can be
# installed (issue 14). Writes OUT/lstmd-<version>-linux-x86_64.tar.gz holding
#
#   bin/       lstmd, lstmctl, and Open MPI's orterun (mpirun, mpiexec) and orted
#   lib/       every shared library those need beyond glibc, libstdc++, libgcc_s and zlib
#              (Open MPI, PMIx, hwloc, libevent, OpenBLAS + libgfortran, inih, jansson, ISA-L,
#              libcsv, libuv, protobuf-c, ...); lib/openmpi/ and lib/pmix/ their plugins;
#              lib/lstmd/liblstmd_gpu.so the GPU backend module when the build has one
#   etc/       the bundle's Open MPI and PMIx defaults (read instead of the host's)
#   share/     Open MPI's and PMIx's help texts; share/lstmd/ example configs, the demo corpus,
#              Slurm scripts, the systemd unit and proto/lstmd.proto; share/doc/<package>/copyright
#              of every Debian package a file was taken from, and share/lstmd/BUNDLED listing them
#   env.sh     to source: PATH and the variables that point Open MPI and PMIx at the bundle
#
# Everything is copied from the Debian packages installed on this build machine (the ones the
# binaries were linked against), so no network is needed. Every ELF file gets an $ORIGIN-relative
# DT_RPATH, so the bundle works at any path without LD_LIBRARY_PATH. The CUDA runtime, cuBLAS,
# cuDNN and NCCL are never bundled: lstmd loads them from the node at run time.
#
#   deploy/make_dist.sh --version V --source SRC --lstmd BIN --lstmctl BIN [--gpu-module SO] --out DIR
set -euo pipefail

die() { echo "make_dist.sh: $*" >&2; exit 1; }
usage() {
  echo "usage: make_dist.sh --version V --source SRC --lstmd BIN --lstmctl BIN [--gpu-module SO] --out DIR" >&2
  exit 2
}
version='' src='' lstmd='' lstmctl='' gpu_module='' out=''
while (($#)); do
  (($# >= 2)) || usage
  case $1 in
    --version) version=$2 ;;
    --source) src=$2 ;;
    --lstmd) lstmd=$2 ;;
    --lstmctl) lstmctl=$2 ;;
    --gpu-module) gpu_module=$2 ;;
    --out) out=$2 ;;
    *) usage ;;
  esac
  shift 2
done
[[ -n $version && -n $src && -n $lstmd && -n $lstmctl && -n $out ]] || usage
for tool in patchelf readelf objdump ldd dpkg-query tar gzip; do
  command -v "$tool" >/dev/null || die "$tool not found (deploy/install-deps.sh dist installs what make dist needs)"
done

# The base every glibc x86-64 node has (packages libc6, libgcc-s1, libstdc++6, zlib1g): never bundled.
base_re='^(libc|libm|libmvec|libdl|libpthread|librt|libutil|libresolv|libanl|ld-linux-x86-64|libgcc_s|libstdc\+\+|libz)\.so\.[0-9]+$'
# The node's GPU stack, which must match its driver: lstmd loads it at run time, never bundled.
cuda_re='^lib(cuda|cudart|cublas|cublasLt|cudnn[A-Za-z_]*|nccl|nvrtc|nvJitLink)\.so(\.[0-9]+)*$'
# Interconnect libraries (UCX, libfabric, verbs, PSM, netlink): they need the node's own drivers
# and providers to be of any use, so the Open MPI plugins that need them are left out and the
# bundle's MPI uses shared memory and TCP (etc/openmpi/openmpi-mca-params.conf says so).
transport_re='^lib(ucp|ucs|uct|ucm|fabric|ibverbs|rdmacm|psm_infinipath|psm2|nl-3|nl-route-3)\.so'

# pkg_grep PACKAGE REGEX: the files of an installed Debian package that match
pkg_grep() {
  local all
  all=$(dpkg-query -L "$1") || die "Debian package $1 is not installed (deploy/install-deps.sh build)"
  grep -- "$2" <<<"$all" || die "Debian package $1 has no file matching $2"
}
ompi_bin_pkg=openmpi-bin       # orterun, orted
ompi_lib_pkg=libopenmpi3       # libmpi.so.40 and the MCA plugins
ompi_data_pkg=openmpi-common   # Open MPI's help texts
pmix_pkg=libpmix2              # libpmix.so.2, its plugins and help texts

# ---- 1. what is being packed
[[ -x $lstmd && -x $lstmctl ]] || die "$lstmd or $lstmctl is not an executable: build them first"
got=$("$lstmd" --version | head -1)
[[ $got == "lstmd $version" ]] ||
  die "$lstmd --version says '$got', CMakeLists.txt says $version: LSTMD_VERSION in daemon/main.c and project(VERSION) disagree"
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'; }
for b in "$lstmd" "$lstmctl"; do
  for so in $(needed "$b"); do
    [[ $so =~ $cuda_re ]] && die "$b links $so directly, so it would not start on a node without CUDA;" \
      "the GPU backend belongs in the lstmd_gpu module"
  done
done
if [[ -n $gpu_module && ! -f $gpu_module ]]; then die "GPU module $gpu_module not found"; fi
# libmpi must be Debian's, whose plugins, help texts and orterun are taken from the packages.
libmpi=$(ldd "$lstmd" | awk '$1 == "libmpi.so.40" {print $3}')
[[ -n $libmpi ]] || die "$lstmd does not link libmpi.so.40 (Open MPI 4)"
libmpi_pkg=$(dpkg-query -S "$(readlink -f "$libmpi")" 2>/dev/null | cut -d: -f1) || true
[[ $libmpi_pkg == "$ompi_lib_pkg" ]] ||
  die "$lstmd links $libmpi, not Debian's $ompi_lib_pkg: this script bundles Debian's Open MPI only"

name=lstmd-$version-linux-x86_64
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$(mktemp -d "$out/.stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
B=$stage/$name
mkdir -p "$B"/{bin,lib/openmpi,lib/pmix,lib/hwloc,etc/openmpi,etc/pmix,share/openmpi,share/pmix,share/lstmd}
declare -A elf=()      # every ELF file of the bundle (path relative to B)
declare -A src_of=()   # bundle path (relative to B) -> the packaged file it was copied from

# ---- 2. the ELF files: binaries, MCA plugins (minus those needing an interconnect library), and
#         the shared libraries of their ldd closure. Open MPI's plugins are dlopen()ed, so ldd of
#         the binaries does not see them; PMIx's likewise.
declare -A lib_of=()   # soname -> installed path, for everything bundled in lib/
add_closure() { # add_closure ELF WHAT: the ELF's ldd closure into lib_of; 1 if it needs an interconnect lib
  local so path found=()
  while read -r so path; do
    [[ $so =~ $base_re ]] && continue
    [[ $so =~ $transport_re ]] && { echo "make_dist.sh: leaving out $2 (needs $so)"; return 1; }
    [[ $path == not ]] && die "$2 needs $so, which this machine cannot find"
    if [[ -n ${lib_of[$so]:-} && $(readlink -f "${lib_of[$so]}") != $(readlink -f "$path") ]]; then
      die "$so resolves to both ${lib_of[$so]} and $path"
    fi
    found+=("$so" "$path")
  done < <(ldd "$1" | awk '$2 == "=>" {print $1, $3}')
  # only now: a plugin left out must not leave its libraries behind
  while ((${#found[@]})); do
    lib_of[${found[0]}]=${found[1]}
    found=("${found[@]:2}")
  done
}
add_elf() { # add_elf SOURCE BUNDLE_PATH [packaged]
  cp -L "$1" "$B/$2"
  elf[$2]=1
  if [[ ${3:-} == packaged ]]; then src_of[$2]=$1; fi
}
for b in "$lstmd" "$lstmctl"; do
  add_closure "$b" "$(basename "$b")" || die "$b needs an interconnect library"
  add_elf "$b" "bin/$(basename "$b")"
done
for b in orterun orted; do
  f=$(pkg_grep "$ompi_bin_pkg" "/bin/$b\$")
  add_closure "$f" "$b" || die "$f needs an interconnect library"
  add_elf "$f" "bin/$b" packaged
done
# Debian makes mpirun/mpiexec with update-alternatives, which files cannot carry: relative links.
ln -s orterun "$B/bin/mpirun"
ln -s orterun "$B/bin/mpiexec"
# OpenSHMEM's frameworks (spml, sshmem, scoll, atomic, memheap) serve OpenSHMEM programs only.
while read -r f; do
  case ${f##*/} in mca_spml_* | mca_sshmem_* | mca_scoll_* | mca_atomic_* | mca_memheap_*) continue ;; esac
  add_closure "$f" "Open MPI plugin ${f##*/}" && add_elf "$f" "lib/openmpi/${f##*/}" packaged
done <<<"$(pkg_grep "$ompi_lib_pkg" '/mca_[^/]*\.so$')"
while read -r f; do
  add_closure "$f" "PMIx plugin ${f##*/}" && add_elf "$f" "lib/pmix/${f##*/}" packaged
done <<<"$(pkg_grep "$pmix_pkg" '/pmix_mca_[^/]*\.so$')"
# The GPU module's CUDA libraries come from the node: only its other direct needs are followed.
if [[ -n $gpu_module ]]; then
  while read -r so path; do
    [[ $so =~ $base_re || $so =~ $cuda_re ]] && continue
    [[ $path == not ]] && die "the GPU module needs $so, which this machine cannot find"
    add_closure "$path" "$so (for the GPU module)" || die "the GPU module needs an interconnect library via $so"
    lib_of[$so]=$path
  done < <(ldd "$gpu_module" | awk '$2 == "=>" {print $1, $3}')
  mkdir -p "$B/lib/lstmd"
  add_elf "$gpu_module" lib/lstmd/liblstmd_gpu.so
fi
for so in "${!lib_of[@]}"; do add_elf "${lib_of[$so]}" "lib/$so" packaged; done

# ---- 3. run paths: $ORIGIN-relative DT_RPATH on every ELF. DT_RPATH rather than DT_RUNPATH
#         because it is searched before LD_LIBRARY_PATH: a cluster module that puts its own
#         libmpi.so.40 on LD_LIBRARY_PATH must not mix with the bundle's plugins. (Each library
#         carries its own, so the rule that DT_RPATH is ignored beside a DT_RUNPATH never applies.)
# shellcheck disable=SC2016 # $ORIGIN is for the dynamic loader, not the shell
for rel in "${!elf[@]}"; do
  case $rel in
    bin/*) rpath='$ORIGIN/../lib' ;;
    lib/*/*) rpath='$ORIGIN/..' ;;
    lib/*) rpath='$ORIGIN' ;;
  esac
  chmod u+w "$B/$rel"
  patchelf --force-rpath --set-rpath "$rpath" "$B/$rel"
done

# ---- 4. help texts and the bundle's defaults for Open MPI and PMIx
while read -r f; do cp "$f" "$B/share/openmpi/"; src_of[share/openmpi/${f##*/}]=$f; done \
  <<<"$(pkg_grep "$ompi_data_pkg" '/help-[^/]*\.txt$')"
while read -r f; do cp "$f" "$B/share/pmix/"; src_of[share/pmix/${f##*/}]=$f; done \
  <<<"$(pkg_grep "$pmix_pkg" '/help-[^/]*\.txt$')"
cat >"$B/etc/openmpi/openmpi-mca-params.conf" <<'EOF'
# Open MPI defaults of the lstmd bundle (env.sh points OPAL_SYSCONFDIR here, so the host's
# /etc/openmpi file is not read). OMPI_MCA_<name> variables and ~/.openmpi/mca-params.conf
# override them.
# Only the shared-memory and TCP transports are bundled (UCX, libfabric, verbs and PSM need the
# node's own drivers and were left out); GPUs talk through NCCL, which uses the node's.
btl = self,vader,tcp
pml = ob1
btl_base_warn_component_unused = 0
# Single-copy shared memory (CMA, process_vm_readv) is refused inside many containers (no
# CAP_SYS_PTRACE, Yama); copy-in/copy-out works everywhere. On a bare-metal node
# OMPI_MCA_btl_vader_single_copy_mechanism=cma speeds up large messages between local ranks.
btl_vader_single_copy_mechanism = none
EOF
cat >"$B/etc/pmix/pmix-mca-params.conf" <<'EOF'
# PMIx defaults of the lstmd bundle: none. env.sh points PMIX_SYSCONFDIR here so that a host
# file naming another PMIx's plugin folder (Debian's does) is not read.
EOF
# HWLOC_PLUGINS_PATH (env.sh) points at this folder, empty: hwloc's plugins are not needed.
touch "$B/lib/hwloc/.keep"

# ---- 5. lstmd's own files
S=$B/share/lstmd
mkdir -p "$S/examples" "$S/data" "$S/slurm" "$S/systemd" "$S/proto" "$S/bench"
# the configs, and the scripts their headers name to make and run them (language_id.sh,
# wave_shapes.sh and .py: they find lstmd on PATH and their config beside themselves)
cp "$src"/deploy/examples/*.{ini,sh,py} "$src/deploy/demo.ini" "$S/examples/"
# `lstmd selftest --bench` runs share/lstmd/bench/bench_gpu.sh (its data: ../data/fortunes.txt)
cp "$src"/bench/{bench_gpu.sh,torch_lstm_gpu_peer.py,gemm_rate_cuda.c} "$S/bench/"
cp "$src"/data/{fortunes.txt,fortunes-LICENSE.txt,seattle-temps.csv,README.md} "$S/data/"
cp "$src"/deploy/slurm/{train,serve}.sbatch "$S/slurm/"
# the unit runs the bundle at /opt/lstmd; its install lines name this version's tarball
sed "s/<version>/$version/g" "$src/deploy/systemd/lstmd.service" >"$S/systemd/lstmd.service"
cp "$src/proto/lstmd.proto" "$S/proto/"
cp "$src/README.md" "$S/"

# ---- 6. licences: the copyright file of every Debian package a file came from, and the list
#         (share/lstmd/BUNDLED, headed by the glibc the node needs)
# One dpkg-query call for all files (it takes ~50 ms a call): "package:arch: /path" lines.
declare -A pkg_of=() pkg_ver=()
rels=("${!src_of[@]}")
paths=()
for rel in "${rels[@]}"; do paths+=("$(readlink -f "${src_of[$rel]}")"); done
while IFS= read -r line; do
  pkg_of[${line#*: }]=${line%%:*}
done < <(dpkg-query -S "${paths[@]}")
bundled=''
for i in "${!rels[@]}"; do
  pkg=${pkg_of[${paths[$i]}]:-}
  [[ -n $pkg ]] || die "no Debian package owns ${paths[$i]}"
  [[ -n ${pkg_ver[$pkg]:-} ]] || pkg_ver[$pkg]=$(dpkg-query -W -f='${Version}' "$pkg")
  bundled+=$(printf '%-44s %s %s' "${rels[$i]}" "$pkg" "${pkg_ver[$pkg]}")$'\n'
done
# The newest glibc symbol version anything needs: the oldest glibc a node may have.
glibc=$(for rel in "${!elf[@]}"; do objdump -T "$B/$rel"; done | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
{
  echo "# needs ${glibc/GLIBC_/glibc >= } on the node (x86-64 Linux); file, Debian package, version:"
  sort <<<"${bundled%$'\n'}"
} >"$S/BUNDLED"
for pkg in "${!pkg_ver[@]}"; do
  mkdir -p "$B/share/doc/$pkg"
  cp -L "/usr/share/doc/$pkg/copyright" "$B/share/doc/$pkg/"
done

# ---- 7. env.sh: only shell builtins, so it works on a node with nothing but bash
cat >"$B/env.sh" <<'EOF'
# env.sh — source this file (bash or zsh) to use the lstmd bundle it sits in: puts bin/ on PATH
# and points Open MPI and PMIx at the bundle's plugins, help texts and defaults. No
# LD_LIBRARY_PATH is needed: every binary finds its libraries through its own run path. In other
# shells, set LSTMD_HOME to the bundle's folder first. Source it again after moving the folder.
if [ -n "${BASH_VERSION:-}" ]; then
  if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    echo "env.sh: source this file ('. $0'); running it changes nothing" >&2
    exit 2
  fi
  _lstmd_env=${BASH_SOURCE[0]}
elif [ -n "${ZSH_VERSION:-}" ]; then
  eval '_lstmd_env=${(%):-%x}'
else
  # sh, dash, ksh: a sourced file cannot learn its own path
  _lstmd_env=${LSTMD_HOME:+$LSTMD_HOME/env.sh}
  _lstmd_why="; this shell does not tell env.sh where it is: set LSTMD_HOME to the bundle's folder first"
fi
case $_lstmd_env in
  */*) _lstmd_env=${_lstmd_env%/*} ;;
  *) _lstmd_env=. ;;
esac
# LSTMD_HOME is set only once the folder is found: a failed try leaves it as it was
if ! _lstmd_home=$(cd "$_lstmd_env" 2>/dev/null && pwd -P) || [ ! -x "$_lstmd_home/bin/lstmd" ]; then
  echo "env.sh: cannot find the lstmd bundle (no bin/lstmd in '$_lstmd_env')${_lstmd_why:-; set LSTMD_HOME}" >&2
  unset _lstmd_env _lstmd_home _lstmd_why
  return 1
fi
export LSTMD_HOME="$_lstmd_home"
unset _lstmd_env _lstmd_home _lstmd_why
export PATH="$LSTMD_HOME/bin${PATH:+:$PATH}"
# Open MPI and PMIx look for their plugins, help texts and settings in the folders Debian
# configured (/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3, /etc/openmpi, /usr/lib/x86_64-
# linux-gnu/pmix2/lib/pmix, ...), absolute or laid out unlike this folder. Each one they read at
# run time is moved here (found by tracing the files they open in a bare root); Open MPI's help
# texts (share/openmpi) and its bindir (bin/orted) follow OPAL_PREFIX.
export OPAL_PREFIX="$LSTMD_HOME"
export OPAL_PKGLIBDIR="$LSTMD_HOME/lib/openmpi"
export OPAL_SYSCONFDIR="$LSTMD_HOME/etc/openmpi"
export PMIX_PKGLIBDIR="$LSTMD_HOME/lib/pmix"
export PMIX_PKGDATADIR="$LSTMD_HOME/share/pmix"
export PMIX_SYSCONFDIR="$LSTMD_HOME/etc/pmix"
# hwloc's plugins (PCI, OpenCL, GL) are not bundled; this keeps a host's, built for another
# hwloc, from being loaded.
export HWLOC_PLUGINS_PATH="$LSTMD_HOME/lib/hwloc"
# Without ssh or rsh, mpirun's default launcher cannot start; on one node it needs none.
# (Under Slurm, mpirun launches through srun instead.)
if [ -z "${SLURM_JOB_ID:-}" ] && ! command -v ssh >/dev/null 2>&1 && ! command -v rsh >/dev/null 2>&1; then
  export OMPI_MCA_plm="${OMPI_MCA_plm:-isolated}"
fi
EOF

# ---- 8. the tarball (written under a temporary name, then renamed)
tarball=$out/$name.tar.gz
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner -cf - "$name" | gzip >"$tarball.tmp"
mv "$tarball.tmp" "$tarball"
echo "make_dist.sh: $tarball: $(du -m "$tarball" | cut -f1) MB ($(du -sm "$B" | cut -f1) MB unpacked;" \
  "${#lib_of[@]} libraries, $(find "$B/lib/openmpi" -name '*.so' | wc -l) Open MPI plugins${gpu_module:+, GPU module};" \
  "needs ${glibc/GLIBC_/glibc >= })"
