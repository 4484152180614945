# Sourced by .ci/run (bash, set -euo pipefail, cwd = repository root):
# `sandbench report`'s browser test (crates/sandbench/tests/it/report.rs)
# loads the HTML report in Debian's Chromium, headless, screenshots it,
# checks that it logs nothing to the console and that the numbers it shows
# equal the JSON's. asciinema records the README's demo cast
# (scripts/demo-cast.sh). Installed here, then required, so the browser test
# fails instead of skipping. Idempotent (apt_need installs only what is missing).
apt_need chromium asciinema
# The same Chromium runs the MCP server's hostile-page test.
require="${require:-process},report,chromium"
