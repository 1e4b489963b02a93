#!/usr/bin/env bash
# Write the tenants of the fleet into nats.conf: for each tenant a user
# "tenant-<name>" whose password is $SANDFLEET_TENANT_<NAME>_PASSWORD (made
# by secrets.sh) and whose permissions confine it to its own jobs, results,
# cancels, events, workspaces, snapshots and artifacts (pkg/jobs/tenant.go
# names them; tenants_test.go and tenants_workspace_test.go prove them on a
# server started from the file this writes).
#
# Usage: tenants.sh [--conf FILE] [NAME...]
#   NAME...  the tenants ([a-z0-9][a-z0-9-]{0,31}); default $SANDFLEET_TENANTS,
#            else SANDFLEET_TENANTS in .env beside this script; none is fine
#   --conf   the file to rewrite (default nats.conf beside this script)
#
# Only the block between "# BEGIN TENANTS" and "# END TENANTS" is rewritten:
# the roles every tenant shares (SUBMITTER, WORKER, and any role added
# later) are edited by hand above it, and survive. A subject a tenant needs
# (a new bucket of per-job data: key it by the job ID, which is
# <tenant>.<id>) goes in tenant_permissions below, with its tenant token.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
conf="$here/nats.conf"
if [ "${1:-}" = "--conf" ]; then
	conf=$2
	shift 2
fi
tenants=("$@")
if [ ${#tenants[@]} -eq 0 ]; then
	list=${SANDFLEET_TENANTS:-}
	if [ -z "$list" ] && [ -f "$here/.env" ]; then
		list=$(sed -n 's/^SANDFLEET_TENANTS=//p' "$here/.env" | tr -d '"')
	fi
	read -r -a tenants <<<"$list"
fi

# var NAME: the suffix of its environment variables (team-a → TEAM_A).
var() { printf '%s' "$1" | tr 'a-z-' 'A-Z_'; }

tenant_permissions() {
	local t=$1 v
	v=$(var "$t")
	cat <<EOT
	# tenant $t: its jobs are jobs.<queue>.$t.<id>, their results and
	# cancels the keys $t.<id>, their events events.$t.<id>, its workspaces
	# the keys $t.<name>, its snapshots and artifacts object stores of its
	# own; it reads nothing else (no info of a shared stream or consumer: a
	# subjects filter would list other tenants' keys). It creates no
	# consumer on a stream another tenant or the operator reads (each
	# stream holds a capped number): a result is waited for by a
	# subscription and read by a direct get, events are followed on
	# EVENTS_$t, which holds $t's alone (jobs.TenantEventsStream).
	TENANT_$v = {
		publish = {
			allow = [
				"jobs.*.$t.*"                                           # submit, to any lane
				"\$JS.API.DIRECT.GET.KV_RESULTS.\$KV.RESULTS.$t.*"        # get a result (no consumer: see subscribe)
				"\$KV.CANCELS.$t.*"                                      # request a cancel
				"\$JS.API.CONSUMER.CREATE.EVENTS_$t.*.events.$t.*"      # follow a job: a consumer filtered to its events,
				"\$JS.API.CONSUMER.MSG.NEXT.EVENTS_$t.*"                # ... on its own stream (capped consumers),
				"\$JS.API.CONSUMER.DELETE.EVENTS_$t.*"                  # ... its pulls and removal
				"\$JS.API.DIRECT.GET.EVENTS_$t.events.$t.*"             # ... and a job's last event
				"\$JS.API.DIRECT.GET.KV_WORKSPACES.\$KV.WORKSPACES.$t.*"  # workspace show: a head
				"\$JS.API.CONSUMER.CREATE.KV_WORKSPACES.*.\$KV.WORKSPACES.$t.*" # ls, watch: a consumer filtered to its keys
				"\$JS.API.CONSUMER.MSG.NEXT.KV_WORKSPACES.*"
				"\$JS.API.CONSUMER.DELETE.KV_WORKSPACES.*"
				"\$KV.WORKSPACES.$t.*"                                   # rm: purge a head
$(for b in SNAPSHOTS ARTIFACTS; do cat <<EOB
				"\$JS.API.STREAM.INFO.OBJ_${b}_$t"                    # its own object store: bind it,
				"\$JS.API.DIRECT.GET.OBJ_${b}_$t.>"                   # ... read an object's meta,
				"\$JS.API.STREAM.MSG.GET.OBJ_${b}_$t"
				"\$JS.API.CONSUMER.CREATE.OBJ_${b}_$t.>"              # ... its chunks, or list them
				"\$JS.API.CONSUMER.DELETE.OBJ_${b}_$t.>"
				"\$JS.FC.OBJ_${b}_$t.>"
				"\$O.${b}_$t.M.*"                                     # ... delete one: a marker on its name, then
				"\$JS.API.STREAM.PURGE.OBJ_${b}_$t"                   # ... its chunks purged (it writes no chunk)
EOB
done)
			]
		}
		subscribe = {
			allow = [
				"_INBOX.$t.>"                                           # its inboxes (nats.CustomInboxPrefix("_INBOX.$t"))
				"results.$t.>"                                          # its named reply_to subjects
				"\$KV.RESULTS.$t.*"                                     # wait for a result: the put wakes it, a direct get reads it
			]
		}
	}
EOT
}

for t in "${tenants[@]}"; do
	if ! [[ "$t" =~ ^[a-z0-9][a-z0-9-]{0,31}$ ]]; then
		echo "tenants: $t: a tenant's name must match [a-z0-9][a-z0-9-]{0,31}" >&2
		exit 2
	fi
done

block=$(mktemp)
trap 'rm -f "$block" "$conf.tmp"' EXIT
{
	echo "	# BEGIN TENANTS: written by tenants.sh (${#tenants[@]}: ${tenants[*]:-none}). Edit tenants.sh, not this block."
	for t in "${tenants[@]}"; do
		tenant_permissions "$t"
		echo
	done
	echo "	users = ["
	echo "		{user: submitter, password: \$SANDFLEET_SUBMITTER_PASSWORD, permissions: \$SUBMITTER}"
	echo "		{user: worker,    password: \$SANDFLEET_WORKER_PASSWORD,    permissions: \$WORKER}"
	for t in "${tenants[@]}"; do
		echo "		{user: tenant-$t, password: \$SANDFLEET_TENANT_$(var "$t")_PASSWORD, permissions: \$TENANT_$(var "$t")}"
	done
	echo "	]"
	echo "	# END TENANTS"
} >"$block"

if ! grep -q '^	# BEGIN TENANTS' "$conf" || ! grep -q '^	# END TENANTS' "$conf"; then
	echo "tenants: $conf has no BEGIN TENANTS / END TENANTS block" >&2
	exit 1
fi
awk -v block="$block" '
	/^\t# BEGIN TENANTS/ { while ((getline line < block) > 0) print line; skip = 1; next }
	/^\t# END TENANTS/ { skip = 0; next }
	!skip { print }
' "$conf" >"$conf.tmp"
cat "$conf.tmp" >"$conf" # keep the file's mode and inode (it is bind-mounted)
echo "tenants: $conf: ${#tenants[@]} tenant(s)${tenants[*]:+: ${tenants[*]}}"
