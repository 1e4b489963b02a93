#!/bin/sh
# Builds a template image: an operator's Dockerfile whose final stage starts
# FROM a sandfleet sandbox image, so that the launcher, the sandbox user and
# the hardening the base sets are still there. build.sh template runs this.
#
#   build.sh template DOCKERFILE [TAG]
#
# The build is offline: nothing is pulled (the base must be a local image)
# and the RUN steps have no network (docker build --network none), so the
# Dockerfile adds files (COPY) and runs what the base already holds. It is
# built under a temporary tag and checked before TAG is given to it; a
# refused image never gets TAG. Refused when the image
#   - does not start FROM a local sandfleet sandbox image (one with the
#     sandfleet.image label: sandbox, sandbox-langs, sandbox-data, or
#     another template), its layers first;
#   - changes the base's ENTRYPOINT (the launcher), USER (10001:10001),
#     WORKDIR, VOLUMEs or HEALTHCHECK;
#   - changes the launcher's bytes, or holds a setuid or setgid file.
# Warned of: a changed value of one of the base's environment variables
# other than PATH (they are the jobs' deterministic defaults).
# On success the image ID is printed on standard output (a template may be
# registered by it), and the image carries the labels sandfleet.template
# (TAG) and sandfleet.template.base (the base's image ID).
#
# Environment:
#   SANDBOX_IMAGE             the tag, when TAG is not given
#   SANDBOX_TEMPLATE_CONTEXT  the build context (default the Dockerfile's directory)
#   SANDBOX_TEMPLATE_BASE     the base image, when the final FROM names it
#                             through an ARG (it is passed as --build-arg BASE)
#   SANDBOX_TEMPLATE_NETWORK  the RUN steps' network (default none; "default"
#                             lets them reach the network, e.g. Debian's
#                             mirror for apt-get: the build is then no
#                             longer offline)
set -eu

log() { echo "build.sh template: $*" >&2; }
usage() {
	[ $# -eq 0 ] || log "$*"
	echo "usage: build.sh template DOCKERFILE [TAG]   (or SANDBOX_IMAGE=TAG)" >&2
	exit 2
}
refuse() {
	log "refused: $*"
	exit 1
}

[ $# -ge 1 ] && [ $# -le 2 ] || usage
dockerfile=$1
tag=${2:-${SANDBOX_IMAGE:-}}
[ -n "$tag" ] || usage "name the image's tag"
[ -f "$dockerfile" ] || usage "$dockerfile is not a file"
context=${SANDBOX_TEMPLATE_CONTEXT:-$(dirname "$dockerfile")}
[ -d "$context" ] || usage "the context $context is not a directory"
network=${SANDBOX_TEMPLATE_NETWORK:-none}

# The base: the image the final stage's FROM names (its flags skipped).
base=${SANDBOX_TEMPLATE_BASE:-}
if [ -z "$base" ]; then
	base=$(awk 'toupper($1) == "FROM" { ref = ""; for (i = 2; i <= NF; i++) if ($i !~ /^--/) { ref = $i; break } }
		END { print ref }' "$dockerfile")
fi
case "$base" in
"") refuse "$dockerfile has no FROM" ;;
*'$'*) refuse "the final FROM names its image through a variable ($base): name the base with SANDBOX_TEMPLATE_BASE" ;;
esac

inspect() { docker image inspect --format "$2" "$1"; }
docker image inspect "$base" >/dev/null 2>&1 ||
	refuse "the base $base is not a local image: build it first (sandbox-image/build.sh [langs|data]); nothing is pulled"
[ -n "$(inspect "$base" '{{index .Config.Labels "sandfleet.image"}}')" ] ||
	refuse "$base is not a sandfleet sandbox image (no sandfleet.image label): start FROM sandfleet/sandbox:latest, sandfleet/sandbox-langs:latest, sandfleet/sandbox-data:latest or another template"
base_id=$(inspect "$base" '{{.Id}}')

# Unique among concurrent builds on one engine, whatever their PID namespace.
tmp=sandfleet/template-build:$$-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
trap 'docker image rm "$tmp" >/dev/null 2>&1 || true' EXIT
log "building $tag FROM $base (network: $network)"
set -- --pull=false --force-rm -q --network "$network" -t "$tmp" \
	--label "sandfleet.template=$tag" --label "sandfleet.template.base=$base_id" \
	-f "$dockerfile"
[ -z "${SANDBOX_TEMPLATE_BASE:-}" ] || set -- "$@" --build-arg "BASE=$base"
docker build "$@" "$context" >/dev/null || { log "docker build failed"; exit 1; }

layers() { inspect "$1" '{{range .RootFS.Layers}}{{.}} {{end}}'; }
base_layers=$(layers "$base")
case "$(layers "$tmp")" in
"$base_layers"*) ;;
*) refuse "the image does not start FROM $base (its layers are not the base's first)" ;;
esac
for field in Entrypoint User WorkingDir Volumes Healthcheck; do
	want=$(inspect "$base" "{{json .Config.$field}}")
	got=$(inspect "$tmp" "{{json .Config.$field}}")
	[ "$got" = "$want" ] || refuse "the image changes the base's $field from $want to $got: the sandbox needs the base's"
done
inspect "$base" '{{range .Config.Env}}{{println .}}{{end}}' | while IFS= read -r kv; do
	case "$kv" in PATH=*) continue ;; esac
	inspect "$tmp" '{{range .Config.Env}}{{println .}}{{end}}' | grep -qxF -- "$kv" ||
		log "warning: the image changes ${kv%%=*} (the base's is $kv), a deterministic default of the jobs"
done

# The filesystem, read as root with no network and no capability but
# DAC_READ_SEARCH, so that no directory's mode hides a file from find.
launcher=/usr/local/bin/sandfleet-launcher
look() {
	docker run --rm --network none --cap-drop ALL --cap-add DAC_READ_SEARCH --security-opt no-new-privileges \
		--user 0:0 --entrypoint /bin/sh "$1" -c "$2"
}
want=$(look "$base" "sha256sum $launcher") || refuse "cannot read $base's launcher"
got=$(look "$tmp" "sha256sum $launcher") || refuse "the image has no readable $launcher (or no /bin/sh)"
[ "${got%% *}" = "${want%% *}" ] || refuse "the image changes $launcher: the launcher must stay the base's"
suid=$(look "$tmp" 'find / -xdev -type f -perm /6000 -print 2>/dev/null | head -20') ||
	refuse "cannot list the image's files (it needs find)"
[ -z "$suid" ] || refuse "setuid or setgid files: $(echo "$suid" | tr '\n' ' ')(strip them as the base does: find / -xdev -type f -perm /6000 -exec chmod ug-s {} +)"

docker tag "$tmp" "$tag"
log "built $tag FROM $base"
inspect "$tag" '{{.Id}}'
