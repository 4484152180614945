# Sourced by .ci/run (bash, set -euo pipefail, cwd = repository root):
# `sandbench report`'s browser test (issue 13) loads the HTML report in
# Debian's Chromium, headless, and compares the numbers it shows with the
# JSON. Installed here and then required, so that test fails instead of
# skipping.
apt_need chromium
require="${require:-process},report"
