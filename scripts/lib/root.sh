# Sourced by scripts/setup, scripts/test and scripts/demo: they need root
# (packages, namespaces, TAPs). As root they just run (a fresh Debian root
# shell has no sudo); otherwise they run themselves again through sudo, and
# under sudo they find the Rust toolchain of the user who called it
# (root's PATH does not hold ~/.cargo/bin).

# need_root "$0" "$@": re-exec through sudo unless root (the caller has
# changed to the repository's root: the script is scripts/<its name>).
need_root() {
    [[ $EUID -eq 0 ]] && return 0
    if command -v sudo >/dev/null; then
        exec sudo -- "$PWD/scripts/${1##*/}" "${@:2}"
    fi
    echo "${1##*/}: needs root, and there is no sudo here: run it as root" >&2
    exit 1
}

# find_cargo: put cargo on PATH (this user's, or SUDO_USER's rustup), or fail.
find_cargo() {
    command -v cargo >/dev/null && return 0
    local homes=("$HOME") h
    [[ -n "${SUDO_USER:-}" ]] && homes+=("$(getent passwd "$SUDO_USER" | cut -d: -f6)")
    for h in "${homes[@]}"; do
        if [[ -x "$h/.cargo/bin/cargo" ]]; then
            export PATH="$h/.cargo/bin:$PATH"
            # rustup's proxies read the toolchains from there.
            [[ -d "$h/.rustup" && -z "${RUSTUP_HOME:-}" ]] && export RUSTUP_HOME="$h/.rustup"
            return 0
        fi
    done
    echo "no Rust toolchain (cargo) found; install one with rustup first" >&2
    return 1
}
