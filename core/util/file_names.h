// SPDX-License-Identifier: MIT
#pragma once
// A file name made from data (a dataset's item id, a run name): only [A-Za-z0-9._-] survive, so a
// path separator, "..", a leading dot or a control character in the data can never reach outside the
// folder it is written into. A name that had to change gets a hash of the original appended, so two
// ids that sanitise alike still give two files.
#include <string>

namespace kvscope {

std::string fileNameComponent(const std::string& text);

}  // namespace kvscope
