#!/bin/sh
# Builds a sandbox image.
#
#   build.sh        sandfleet/sandbox:latest, the "python" and "shell" presets
#   build.sh langs  sandfleet/sandbox-langs:latest, the "node", "c", "cpp",
#                   "java", "go" and "rust" presets: always offline, from a
#                   Debian bookworm base with python3, nodejs (+ node-typescript,
#                   which a session's TypeScript context transpiles with),
#                   gcc/g++, openjdk-17, golang-go (+ testify) and rustc (+ the
#                   rand, regex and md5 crates, prebuilt), cached as
#                   sandfleet/debian-langs-base:bookworm (rebuilt when it lacks
#                   a package of the list)
#   build.sh data   sandfleet/sandbox-data:latest, the "python-data" preset:
#                   always offline, Debian bookworm's python3 with numpy,
#                   pandas, matplotlib, scipy, scikit-learn, sympy and pillow,
#                   cached as sandfleet/debian-data-base:bookworm
#   build.sh template DOCKERFILE [TAG]
#                   a template image: the operator's Dockerfile, whose final
#                   stage starts FROM one of the images above (or another
#                   template), built offline and checked to keep the
#                   launcher, user and hardening (sandbox-image/template.sh;
#                   docs/templates.md)
#
# The default image:
#   online:  FROM python:3.12-slim + pip install of the seed's pinned versions
#   offline: a Debian bookworm base made with mmdebstrap from this machine's
#            apt sources, imported as sandfleet/debian-python-base:bookworm
#            and cached: a second build skips mmdebstrap and takes seconds.
#
# The path is chosen automatically: offline when the online base is neither
# present nor pullable. Environment:
#   SANDBOX_BUILD=auto|online|offline   force a path (default auto)
#   SANDBOX_IMAGE                       tag to build (default sandfleet/sandbox:latest,
#                                       or sandfleet/sandbox-langs:latest for langs,
#                                       sandfleet/sandbox-data:latest for data)
#   SANDBOX_REBUILD_BASE=1              rebuild the offline base even if cached
#   SANDBOX_APT_SOURCES                 deb822 sources for mmdebstrap
#                                       (default /etc/apt/sources.list.d/debian.sources)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
flavor=${1:-default}
if [ "$flavor" = template ]; then
	shift
	exec "$here/template.sh" "$@"
fi
online_base=python:3.12-slim
case "$flavor" in
default)
	image=${SANDBOX_IMAGE:-sandfleet/sandbox:latest}
	offline_base=sandfleet/debian-python-base:bookworm
	hook=
	packages=python3,python3-requests,python3-bs4
	dockerfile=$here/Dockerfile
	mode=${SANDBOX_BUILD:-auto}
	;;
langs)
	image=${SANDBOX_IMAGE:-sandfleet/sandbox-langs:latest}
	offline_base=sandfleet/debian-langs-base:bookworm
	# update-alternatives (openjdk's) wants the man directories that the
	# path-exclude below leaves out.
	hook=--setup-hook='mkdir -p "$1/usr/share/man/man1"'
	packages=passwd,bash,python3,nodejs,node-typescript,gcc,g++,libc6-dev,openjdk-17-jdk-headless,golang-go,golang-github-stretchr-testify-dev,rustc,cargo,librust-rand-dev,librust-regex-dev,librust-md5-dev
	dockerfile=$here/langs/Dockerfile
	mode=offline
	;;
data)
	image=${SANDBOX_IMAGE:-sandfleet/sandbox-data:latest}
	offline_base=sandfleet/debian-data-base:bookworm
	hook=
	packages=python3,python3-requests,python3-bs4,python3-numpy,python3-pandas,python3-matplotlib,python3-scipy,python3-sklearn,python3-sympy,python3-pil
	dockerfile=$here/data/Dockerfile
	mode=offline
	;;
*)
	echo "build.sh: unknown image $flavor (want nothing, langs, data or template)" >&2
	exit 2
	;;
esac
sources=${SANDBOX_APT_SOURCES:-/etc/apt/sources.list.d/debian.sources}
pip_packages="requests==2.32.3 beautifulsoup4==4.12.3"

log() { echo "build.sh: $*" >&2; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }

log "building the launcher (static)"
mkdir -p "$here/build"
(cd "$root" && CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w' \
	-o "$here/build/launcher" ./sandbox-image/launcher)

if [ "$mode" = auto ]; then
	if have_image "$online_base"; then
		mode=online
	elif timeout 60 docker pull "$online_base" >/dev/null 2>&1; then
		mode=online
	else
		log "cannot pull $online_base: using the offline path"
		mode=offline
	fi
fi

build_offline_base() {
	if [ "${SANDBOX_REBUILD_BASE:-0}" != 1 ] && have_image "$offline_base"; then
		# A base cached before a package joined the list is rebuilt, so
		# that adding a package needs no SANDBOX_REBUILD_BASE by hand.
		pkgs=$(echo "$packages" | tr , ' ')
		# shellcheck disable=SC2086
		if docker run --rm --network none --entrypoint dpkg-query "$offline_base" -W $pkgs >/dev/null 2>&1; then
			log "offline base $offline_base is cached"
			return
		fi
		log "offline base $offline_base lacks a package of the list: rebuilding it"
	fi
	if ! command -v mmdebstrap >/dev/null 2>&1; then
		if [ "$(id -u)" = 0 ]; then
			log "installing mmdebstrap"
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >&2
		else
			log "mmdebstrap is missing: install it (apt-get install mmdebstrap) or run as root"
			exit 1
		fi
	fi
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	log "building $offline_base with mmdebstrap (takes a minute or two; langs longer)"
	set -- --variant=minbase --include="$packages" \
		--dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		${hook:+"$hook"} bookworm "$tmp/base.tar"
	if [ -r "$sources" ]; then
		mmdebstrap "$@" - <"$sources" >&2
	else
		log "$sources not found: using mmdebstrap's default mirror"
		mmdebstrap "$@" >&2
	fi
	docker import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'CMD ["/bin/bash"]' \
		"$tmp/base.tar" "$offline_base" >/dev/null
}

case "$mode" in
online)
	log "building $image FROM $online_base"
	docker build -q -t "$image" --build-arg "BASE=$online_base" \
		--build-arg "PIP_PACKAGES=$pip_packages" -f "$dockerfile" "$here" >/dev/null
	;;
offline)
	build_offline_base
	log "building $image FROM $offline_base"
	docker build -q -t "$image" --build-arg "BASE=$offline_base" -f "$dockerfile" "$here" >/dev/null
	;;
*)
	log "SANDBOX_BUILD must be auto, online or offline, not $mode"
	exit 2
	;;
esac
log "built $image ($mode)"
