// SPDX-License-Identifier: MIT
#pragma once
// The window's one source of job ids. Every request to the worker gets the next id, so ids grow in
// the order requests are queued (the worker relies on that to tell queued jobs from finished ones).
// Each kind of job has one current job whose results the views show; the results of any other are
// stale. For kinds that replace what the views show (an analysis, a transplant, a session decode), a
// newer request supersedes an older one still open: start() names it so the caller can cancel it.
#include <QtGlobal>

#include <map>
#include <set>

namespace kvscope::widgets {

enum class JobKind { OpenModel, Analysis, Transplant, Decode, Batch, Locate };

class JobTracker {
public:
    struct Started {
        quint64 job = 0;
        quint64 superseded = 0;  // the open job of this kind that `job` replaces, 0 if none
    };

    Started start(JobKind kind);
    void close(quint64 job);  // finished, failed or cancelled

    bool isCurrent(JobKind kind, quint64 job) const;
    bool anyOpen() const { return !open_.empty(); }
    quint64 lastIssued() const { return last_; }

private:
    quint64 last_ = 0;
    std::map<JobKind, quint64> current_;
    std::set<quint64> open_;  // queued or running
};

}  // namespace kvscope::widgets
