# Prints what go test said of each failure: the --- FAIL lines with the
# indented lines under them, panics with the lines after them, and the
# FAIL lines of the packages.
/^[[:space:]]*--- FAIL/ { keep = 1; print; next }
/^panic: / { keep = 40; print; next }
keep == 1 && /^[[:space:]]/ && !/^[[:space:]]*--- (PASS|SKIP)/ { print; next }
keep > 1 { print; keep--; if (keep == 1) keep = 0; next }
/^FAIL/ { print }
{ keep = 0 }
