# The bash side of a code context (codectx_lang.go). Each request on fd 3
# is a line "NONCE BASE64", the cell's code; the cell runs in this shell
# (eval at the top level), so that its cd, variables, functions and
# exported environment are there for the next, and is answered on fd 4
# with {"nonce", "exit"}, the status of its last command, on a line of its
# own. SIGINT, the launcher's interrupt at a cell's timeout, goes to the
# whole group: the command running dies of it, and the trap resumes the
# outermost loop, this one, with the cell's status 130; the shell lives on.
__sf_nonce=
while :; do
	if [ -n "$__sf_nonce" ]; then
		printf '\n{"nonce":"%s","exit":%d}\n' "$__sf_nonce" "$__sf_status" >&4
		__sf_nonce=
	fi
	trap 'continue 1000' INT
	IFS=' ' read -r __sf_nonce __sf_code <&3 || exit 0
	__sf_status=130
	__sf_code=$(printf '%s' "$__sf_code" | base64 -d) || { __sf_status=2; continue; }
	eval "$__sf_code" <&-
	__sf_status=$?
done
