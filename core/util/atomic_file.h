// SPDX-License-Identifier: MIT
#pragma once
// Files that are either absent (or as before) or complete, never half-written: the bytes go to
// PATH.partial, are fsynced, renamed over PATH, and the folder is fsynced so that the rename itself
// survives a crash. A PATH.partial left by an interrupted write is simply overwritten by the next
// write of PATH; folders that may hold strays are swept with removePartialFiles.
#include <functional>
#include <ostream>
#include <string>

namespace kvscope {

// FormatError naming the file when it cannot be written (and no PATH.partial is left behind).
void writeFileAtomically(const std::string& path, const std::function<void(std::ostream&)>& write);
void writeTextFileAtomically(const std::string& path, const std::string& text);
// Makes a finished file or folder's name durable: fsync of the folder that holds it.
void syncParentFolder(const std::string& path);
// Removes FOLDER/*.partial (files and folders); returns how many there were.
int removePartialFiles(const std::string& folder);

}  // namespace kvscope
