/* Prints its arguments as the C runtime split them (argv, MSVCRT rules), each followed by a record separator
   (0x1e), in UTF-8: a stand-in for pwsh.exe/powershell.exe in exec-windows.test.js (wine has no PowerShell); built by
   scripts/build-windows.sh. */
#include <fcntl.h>
#include <io.h>
#include <stdio.h>
#include <windows.h>
int wmain(int argc, wchar_t **argv) {
  static char buf[1 << 16];
  _setmode(_fileno(stdout), _O_BINARY); /* no \n -> \r\n */
  for (int i = 0; i < argc; i++) {
    int n = WideCharToMultiByte(CP_UTF8, 0, argv[i], -1, buf, sizeof buf, NULL, NULL);
    if (n > 0) fwrite(buf, 1, n - 1, stdout);
    fputc(0x1e, stdout);
  }
  return 0;
}
