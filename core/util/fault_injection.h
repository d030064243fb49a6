// SPDX-License-Identifier: MIT
#pragma once
// Crash-safety testing by fault injection, as SQLite tests itself: every operation that changes a
// file (a write, fsync, truncate, rename or delete, kvscope's own or SQLite's) is a numbered fault
// point, and a test ends the process at point N to check that a resumed run still gives the
// uninterrupted result. Compiled in only with KVSCOPE_FAULT_INJECTION (the dev preset; not release,
// not the default), and then inert unless the environment asks:
//   KVSCOPE_FAULT_AT=N        SIGKILL at the Nth fault point (after one line on stderr naming it)
//   KVSCOPE_FAULT_COUNT=FILE  at exit, write the number of fault points passed to FILE
namespace kvscope::fault {

// Marks one file-changing operation (`operation` names it in the line printed before the kill).
void point(const char* operation);

// Routes SQLite's file operations through a VFS that calls point() before each write, sync,
// truncate and delete. Call once before the first database is opened; a no-op when not armed.
void installSqliteHook();

}  // namespace kvscope::fault
