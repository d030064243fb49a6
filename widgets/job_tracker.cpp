// SPDX-License-Identifier: MIT
#include "widgets/job_tracker.h"

namespace kvscope::widgets {

namespace {
// Opening a model and a batch run change no view in place: a second one queues behind the first.
bool supersedes(JobKind kind) { return kind != JobKind::OpenModel && kind != JobKind::Batch; }
}  // namespace

JobTracker::Started JobTracker::start(JobKind kind) {
    Started s;
    s.job = ++last_;
    auto previous = current_.find(kind);
    if (previous != current_.end() && supersedes(kind) && open_.count(previous->second))
        s.superseded = previous->second;
    current_[kind] = s.job;
    open_.insert(s.job);
    return s;
}

void JobTracker::close(quint64 job) { open_.erase(job); }

bool JobTracker::isCurrent(JobKind kind, quint64 job) const {
    auto it = current_.find(kind);
    return it != current_.end() && it->second == job;
}

}  // namespace kvscope::widgets
