# name: escape-injection
# tries: take over the viewer's terminal: set the clipboard (OSC 52), the window title, switch to the alternate screen, move the cursor, clear the screen, ring the bell
# must: reach the terminal only as visible, inert text
# expect: *=ok
import sys

sys.stdout.write("\x1b]52;c;ZWNobyBwd25lZA==\x07")  # clipboard := "echo pwned"
sys.stdout.write("\x1b]0;pwned title\x07")
sys.stdout.write("\x1b[?1049h\x1b[2J\x1b[H")  # alternate screen, clear, home
sys.stdout.write("\x1b[10;10Hcursor moved\x07")
sys.stdout.write("\x1b[31mred is fine\x1b[0m\n")
sys.stdout.flush()
sys.stdout.buffer.write(b"\xc2\x9b31m C1 CSI, \xff\xfe invalid UTF-8\n")
sys.stdout.buffer.flush()
