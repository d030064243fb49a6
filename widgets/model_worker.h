// SPDX-License-Identifier: MIT
#pragma once
// The one worker that owns models and runs everything slow, in its own thread: opening a model,
// rebuilding an item's live and prefill caches and their continuations, transplants, interactive
// decodes and whole batch runs. The GUI talks to it through thread-safe request methods (each posts
// the job into the worker's thread) and hears back through signals carrying plain value snapshots
// (no torch types cross into widget code). Every request carries a job id from the window's
// JobTracker; ids grow in queue order. Cancellation is cooperative (a flag checked per token and
// between batch items) and reaches queued jobs too: a job cancelled before it starts never runs.
// Each job ends with exactly one of finished, failed or cancelled.
#include "experiments/ledger.h"
#include "experiments/replay_inspection.h"

#include "core/cache/cache_diff.h"

#include <QObject>
#include <QString>
#include <QStringList>
#include <QVector>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

namespace kvscope::widgets {

struct TokenView {
    int64_t id = 0;
    QString text;
    bool hasStep = false;         // prompt and prefix tokens have no step data
    bool special = false;         // a special token of the tokenizer (<|im_start|>, <|eot_id|>, ...)
    double logprob = 0, margin = 0;
    QVector<QPair<QString, double>> top;  // best alternatives: (text [id], logit)
};

struct SideView {
    QString label;                // "live", "prefill", "prefill <- live (layers 0-3, kv)"
    std::vector<TokenView> tokens;
};

// An item (from a ledger or the interactive session) analysed at its stage boundary.
struct AnalysisView {
    quint64 job = 0;
    QString title;
    std::vector<TokenView> prefix;  // prompt + trace[0:boundary]
    int promptLength = 0;           // prefix[0:promptLength] is the prompt
    SideView live, prefill;
    int firstDivergence = -1;       // in the continuations, -1 when equal
    CacheDiff diff;                 // live vs prefill caches at the boundary
    int layers = 0;
    // The batch protocol's continuations of the item's prompt, when the run has them: per kernel
    // set, alone (size 1) first, then each batch size's, its first divergence from alone marked.
    struct BatchSide {
        QString kernels;
        int size = 1;
        int firstDivergence = -1;  // from alone's continuation; -1 when equal
        QString note;              // the ledger's cell: logits and cache equal, the first differing op
        std::vector<TokenView> tokens;
    };
    std::vector<BatchSide> batch;
    bool hasBoundary = true;        // false: an item the trace gave no boundary; only `batch` is filled
    bool liveVsPrefill = true;      // false: a chosen pair of constructions / precisions
    QString diffNote;               // why there is no element-wise diff (precisions differ), if so
    // The ledger's localize result (the smallest sufficient layer range), if there is one.
    bool hasLocalize = false;
    std::vector<int64_t> localizeLayers;
    bool localizeKeys = false, localizeValues = false;
};

// One side of a comparison at the boundary: how its cache is built over the same prefix ids
// ("live", "prefill", "incremental[:K]", "chunked:N"), in which precision and with which kernels
// ("torch", "invariant"; empty: the run's).
struct SideSpec {
    QString construction = QStringLiteral("live");
    QString dtype;
    QString kernels;
};

// An imported trajectory's tokens as text (the ledger holds ids; the run's tokenizer reads them).
struct TrajectoryTokens {
    quint64 job = 0;
    QString itemId;
    std::vector<TokenView> prompt, output;
    std::map<int64_t, QString> argmaxTexts;  // every replay's argmax tokens, by id
};

// Where two references' computations of one replayed step first part (experiments::locateReplayStep).
struct StepLocation {
    quint64 job = 0;
    QString itemId;
    int step = -1;
    QString references;   // "prefill vs live"
    QString model;        // the replay's kernels and precision: "torch kernels, bf16"
    int opsCompared = 0;
    bool differs = false;
    QString firstOp;      // "layer 3 attn_output" where they part
    double maxAbs = 0;    // there, max |a - b| in fp32
    int differing = 0, elements = 0;
};

struct TransplantRequest {
    bool intoPrefill = true;        // true: prefill <- live (donor live); false: live <- prefill
    std::vector<int64_t> keyLayers, valueLayers;
    int64_t positionBegin = 0, positionEnd = -1;
};

struct TransplantView {
    quint64 job = 0;
    QString description;
    SideView result;
    QString verdict;                // "follows donor", "follows recipient", "neither"
    int splitFromDonor = -1;        // first index where the result leaves the donor's continuation
};

struct ModelSummary {
    QString dir, dtype, device, architecture, fingerprint;
    int layers = 0;
};

// Interactive decode result: the prompt ids and the generated trace with its steps.
struct SessionDecode {
    quint64 job = 0;
    std::vector<int64_t> promptIds, traceIds;
    std::vector<TokenView> prompt, trace;
};

QString verdictOf(const std::vector<TokenView>& result, const std::vector<TokenView>& donor,
                  const std::vector<TokenView>& recipient, int* splitFromDonor);

class ModelWorker : public QObject {
    Q_OBJECT
public:
    ModelWorker();
    ~ModelWorker() override;

    // Thread-safe requests: each runs later in the worker's thread. `job` ids let the GUI drop
    // results that a newer request has made stale, and name the job to cancel.
    void openModel(quint64 job, const QString& dir, const QString& dtype);
    void analyzeLedgerItem(quint64 job, const experiments::RunInfo& run, const experiments::ItemRecord& item);
    void decodeSession(quint64 job, const QString& promptText, const QString& promptIds, int maxNewTokens);
    void analyzeSession(quint64 job, const std::vector<int64_t>& prompt, const std::vector<int64_t>& trace,
                        int boundary, int maxNewTokens);
    void transplant(quint64 job, const TransplantRequest& request);
    // An imported run's item: its tokens as text (trajectoryTokensReady); one step located between
    // the references `basis` compares (stepLocated), on the model of basis.label's kernels and precision.
    void describeTrajectory(quint64 job, const experiments::RunInfo& run, const experiments::ItemRecord& item);
    void locateReplayStep(quint64 job, const experiments::RunInfo& run, const experiments::ItemRecord& item,
                          const experiments::DeltaBasis& basis, int step);
    // Any two constructions or precisions over the current boundary's prefix, continued and compared.
    void compareSides(quint64 job, const SideSpec& a, const SideSpec& b);
    void runBatch(quint64 job, const QString& experimentFile, const QString& ledgerPath);
    // Any thread. cancel: one job, queued or running; cancelThrough: every job up to that id (Esc).
    void cancel(quint64 job);
    void cancelThrough(quint64 lastJob);

signals:
    void started(quint64 job, const QString& task);
    void progress(int done, int total, const QString& message);
    void tokenDecoded(quint64 job, const kvscope::widgets::TokenView& token);
    void modelOpened(const kvscope::widgets::ModelSummary& model);
    void analysisReady(const kvscope::widgets::AnalysisView& analysis);
    void transplantReady(const kvscope::widgets::TransplantView& result);
    void sessionDecoded(const kvscope::widgets::SessionDecode& decode);
    void trajectoryTokensReady(const kvscope::widgets::TrajectoryTokens& tokens);
    void stepLocated(const kvscope::widgets::StepLocation& location);
    void batchFinished(const QString& ledgerPath, const QString& summary);
    void finished(quint64 job, const QString& task);
    void failed(quint64 job, const QString& task, const QString& message);
    void cancelled(quint64 job, const QString& task);

private:
    void post(quint64 job, const QString& task, std::function<void()> work);
    bool beginJob(quint64 job);  // false: cancelled while queued
    void endJob();
    bool keepGoing() const { return !cancelRunning_.load(); }
    void useImportedRun(const experiments::RunInfo& run);  // worker thread
    struct State;  // models, tokenizer, the last boundary state; touched only in the worker thread
    std::unique_ptr<State> state_;

    // Cancellation. Jobs start in id order, so an id up to lastStarted_ other than running_ has ended.
    std::mutex cancelMutex_;
    quint64 running_ = 0, lastStarted_ = 0, cancelledThrough_ = 0;
    std::set<quint64> cancelledQueued_;
    std::atomic<bool> cancelRunning_{false};  // the running job's flag, read per token
};

void registerWorkerMetaTypes();  // once, before connecting queued signals

}  // namespace kvscope::widgets

Q_DECLARE_METATYPE(kvscope::widgets::TokenView)
Q_DECLARE_METATYPE(kvscope::widgets::ModelSummary)
Q_DECLARE_METATYPE(kvscope::widgets::AnalysisView)
Q_DECLARE_METATYPE(kvscope::widgets::TransplantView)
Q_DECLARE_METATYPE(kvscope::widgets::SessionDecode)
Q_DECLARE_METATYPE(kvscope::widgets::SideSpec)
Q_DECLARE_METATYPE(kvscope::widgets::TrajectoryTokens)
Q_DECLARE_METATYPE(kvscope::widgets::StepLocation)
