# Shared by scripts/serve and scripts/test: install what is missing, build.
# Sourced, not run. Builds out of tree in $BUILD (default: build/).

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}

BUILD_PACKAGES="autoconf automake libtool pkg-config make gcc libzmq3-dev libczmq-dev
 libjansson-dev libwebsockets-dev libseccomp-dev libssl-dev zlib1g-dev
 python3-dev"
# What kernels import: ipykernel, and what E2B's code-interpreter template
# preinstalls wherever Debian packages it (docs/e2b.md lists them), and
# `python` for python3, which E2B's template has and its users call.
# python3-netifaces lets jupyter_client list a kernel's addresses without
# running `ip addr` in every kernel as it starts.
KERNEL_PACKAGES="python3-ipykernel python3-netifaces python3-matplotlib python3-numpy python3-pandas
 python3-seaborn python3-scipy python3-sklearn python3-openpyxl python3-xlrd python3-requests
 python3-bs4 python3-sympy python3-plotly python3-aiohttp python3-gensim python3-imageio
 python3-nltk python3-numba python3-opencv python3-docx python3-skimage python3-soundfile
 python3-xarray python3-pil python3-joblib python3-tz python3-urllib3 python3-pip
 python3-setuptools python3-pexpect python-is-python3"

# Every language E2B's SDK names, as kernels: Glovebox's own bash kernel
# (kernels/bash) needs pexpect; its Java kernel (kernels/java) OpenJDK's
# JShell; R is Debian's IRkernel; jupyter-client gives the `jupyter
# kernelspec` command npm's kernel installers call. JavaScript and
# TypeScript come from npm (ensure_npm_kernels).
LANGUAGE_PACKAGES="python3-pexpect openjdk-17-jdk-headless r-cran-irkernel jupyter-client g++ make"
# Egress (--egress-allow): the veth pairs, the nft tables, the sandboxes'
# resolvers (kernel-host/net.h).
NETWORK_PACKAGES="iproute2 nftables dnsmasq-base"
# --home-storage disk formats each sandbox's home (kernel-host/homedisk.h);
# memory checkpoints' pages are compressed with zstd's program
# (kernel-host/checkpoint_pages.c).
STORAGE_PACKAGES="e2fsprogs zstd"

# Memory pause (kernel-host/checkpoint.h) runs CRIU 4.1 or newer. Debian 12's
# 3.17 cannot run on current kernels, so ensure_criu builds 4.2 from the
# source beside the repository (../shared/criu, as `git archive` made it)
# with one upstream fix (deploy/criu/), into /usr/local/sbin/criu.
CRIU_PACKAGES="build-essential pkg-config python3-protobuf libprotobuf-c-dev protobuf-c-compiler
 libprotobuf-dev protobuf-compiler libnl-3-dev libnet1-dev libcap-dev libbsd-dev libnftables-dev
 libgnutls28-dev libaio-dev uuid-dev nftables"
CRIU_PREFIX=${CRIU_PREFIX:-/usr/local}

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

# Installs the Debian packages named in "$@" that are not installed yet.
ensure_packages() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
        "${missing[@]}" </dev/null
}

# Configures (once) and builds incrementally. Extra configure flags: "$@".
build() {
    if [ ! -x "$ROOT/configure" ] || [ "$ROOT/configure.ac" -nt "$ROOT/configure" ] ||
        [ "$ROOT/Makefile.am" -nt "$ROOT/configure" ]; then
        log "autoreconf"
        (cd "$ROOT" && autoreconf -fi) >/dev/null
    fi
    # configure refuses to build out of tree beside a source tree configured
    # in place ("source directory already configured"): say what to do.
    if [ "$(cd "$BUILD" 2>/dev/null && pwd)" != "$ROOT" ] && [ -f "$ROOT/config.status" ]; then
        log "$ROOT was configured in place (./configure there), where no build can go beside it:"
        log "run 'make distclean' in $ROOT, then build in build/ (docs/operations.md#install-as-a-service)"
        return 1
    fi
    mkdir -p "$BUILD"
    if [ ! -f "$BUILD/Makefile" ]; then
        log "configure $*"
        (cd "$BUILD" && "$ROOT/configure" -q "$@")
    fi
    log "make"
    make -C "$BUILD" -s -j"$(nproc)"
}

# Installs npm's JavaScript (ijavascript) and TypeScript (tslab) kernels
# globally, with their kernelspecs, when missing. ijavascript's zeromq 5 has
# no prebuilt binary for Node 20 and its own build downloads libzmq from
# GitHub: --zmq-external links Debian's libzmq instead. tslab's zeromq 6
# ships one for Node 20.
ensure_npm_kernels() {
    local sudo="" kernels=/usr/local/share/jupyter/kernels
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    command -v npm >/dev/null || ensure_packages nodejs npm
    if ! command -v ijskernel >/dev/null; then
        log "installing ijavascript (npm)"
        $sudo npm install -g --no-audit --no-fund ijavascript --zmq-external || return 1
    fi
    if [ ! -f "$kernels/javascript/kernel.json" ]; then
        # Its own installer, through Debian's jupyter kernelspec.
        PATH=/usr/bin:/bin $sudo ijsinstall --install=global --hide-undefined ||
            return 1
    fi
    if ! command -v tslab >/dev/null; then
        log "installing tslab (npm)"
        $sudo npm install -g --no-audit --no-fund tslab || return 1
    fi
    if [ ! -f "$kernels/tslab/kernel.json" ]; then
        PATH=/usr/bin:/bin $sudo tslab install --python=/usr/bin/python3 --prefix=/usr/local ||
            return 1
    fi
    # Glovebox's own javascript and typescript kernels (kernels/javascript)
    # read TypeScript, imports and top-level await with its compiler API:
    # version 5 (7 is a native compiler, without a JavaScript API).
    local ts
    ts=$(npm root -g)/typescript/package.json
    if [ "$(node -p "require('$ts').version.split('.')[0]" 2>/dev/null)" != 5 ]; then
        log "installing typescript 5 (npm)"
        $sudo npm install -g --no-audit --no-fund typescript@5 || return 1
    fi
}

# Builds and installs CRIU (see CRIU_PACKAGES) unless the one there is this
# recipe's: the tarball's digest and the patches', kept beside it. Needs root;
# returns 1 (and says why) when it cannot, and pause then keeps files only.
ensure_criu() {
    local tarball="" patch dir
    local patches=("$ROOT"/deploy/criu/criu-4.2-*.patch)
    for dir in "$ROOT/../shared/criu" /work/shared/criu; do
        [ -f "$dir/criu-4.2.tar.gz" ] && tarball="$dir/criu-4.2.tar.gz" && break
    done
    if [ -z "$tarball" ]; then
        log "no criu-4.2.tar.gz in ../shared/criu: memory pause stays off"
        return 1
    fi
    local recipe stamp="$CRIU_PREFIX/share/glovebox/criu.recipe"
    recipe="$(sha256sum "$tarball" "${patches[@]}" | cut -d' ' -f1 | tr '\n' ' ')"
    if [ -x "$CRIU_PREFIX/sbin/criu" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$recipe" ]; then
        return 0
    fi
    if [ "$(id -u)" -ne 0 ]; then
        log "not root: CRIU is not built, memory pause stays off"
        return 1
    fi
    # shellcheck disable=SC2086 # a list of package names
    ensure_packages $CRIU_PACKAGES
    local work="$BUILD/criu-build"
    log "building CRIU 4.2 with deploy/criu's fixes (once per machine, about a minute)"
    rm -rf "$work" && mkdir -p "$work"
    tar -xzf "$tarball" -C "$work" || { log "$tarball does not unpack: memory pause stays off"; return 1; }
    for patch in "${patches[@]}"; do
        patch -d "$work/criu-4.2" -p1 -s <"$patch" || {
            log "$patch does not apply: memory pause stays off"
            return 1
        }
    done
    make -C "$work/criu-4.2" -j"$(nproc)" criu >"$work/make.log" 2>&1 &&
        install -D -m 0755 "$work/criu-4.2/criu/criu" "$CRIU_PREFIX/sbin/criu" || {
        tail -20 "$work/make.log" >&2 2>/dev/null
        log "CRIU did not build ($work/make.log): memory pause stays off"
        return 1
    }
    mkdir -p "$(dirname "$stamp")" && printf '%s\n' "$recipe" >"$stamp"
    rm -rf "$work"
}
