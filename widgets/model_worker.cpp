// SPDX-License-Identifier: MIT
// libtorch's headers come before any Qt header: Qt's `slots` / `signals` keyword macros would
// otherwise rewrite identifiers inside them (c10::ivalue::Object::slots()).
#include "experiments/protocols.h"
#include "experiments/replay_locate.h"
#include "experiments/runner.h"
#include "experiments/trajectories.h"

#include "core/cache/constructions.h"
#include "core/cache/transplant.h"
#include "core/decode/generator.h"
#include "core/model/transformer.h"
#include "core/text/tokenizer.h"
#include "core/util/error.h"

#include "widgets/model_worker.h"

#include <QMetaObject>

#include <map>
#include <optional>
#include <set>

namespace kvscope::widgets {

using experiments::ExperimentConfig;
using experiments::ItemContext;

namespace {
std::vector<int64_t> idsOf(const std::vector<TokenView>& tokens) {
    std::vector<int64_t> ids;
    for (const TokenView& t : tokens) ids.push_back(t.id);
    return ids;
}
}  // namespace

// Everything here lives in the worker thread.
struct ModelWorker::State {
    // The current model context: an experiment configuration (a run's, or a session's defaults),
    // its models by dtype and its tokenizer.
    std::optional<ExperimentConfig> config;
    std::unique_ptr<experiments::ModelPool> models;
    std::optional<Tokenizer> tokenizer;
    std::set<int64_t> specialIds;  // the tokenizer's special tokens, marked in the decode panes
    std::string contextKey;  // run id or "session:" + dir + dtype
    // The last analysed boundary, for transplants.
    std::optional<experiments::BoundaryState> boundary;
    AnalysisView lastAnalysis;

    ItemContext context() { return ItemContext{*config, *tokenizer, models.get(), ""}; }
    const Transformer& mainModel() { return models->get(config->dtypes.front()); }

    // `loadNow`: the main model at once (its config.json and weights' errors say the most); an
    // imported run's models load when a step is located, its tokenizer is all its tokens need.
    void useConfig(ExperimentConfig c, const std::string& key, bool loadNow = true) {
        if (key == contextKey) return;
        boundary.reset();
        contextKey.clear();
        models = std::make_unique<experiments::ModelPool>(c.modelDir, c.device, c.numerics());
        if (loadNow) models->get(c.dtypes.front());
        tokenizer = Tokenizer::fromModelDir(c.modelDir);
        specialIds.clear();
        for (const AddedToken& t : tokenizer->addedTokens())
            if (t.special) specialIds.insert(t.id);
        config = std::move(c);
        contextKey = key;
    }

    QString tokenText(int64_t id) const { return QString::fromStdString(tokenizer->decode({id})); }

    TokenView view(int64_t id) const {
        TokenView t{id, tokenText(id), false, false, 0, 0, {}};
        t.special = specialIds.count(id) != 0;
        return t;
    }

    TokenView view(const StepRecord& s) const {
        TokenView t = view(s.id);
        t.hasStep = true;
        t.logprob = s.logprob;
        t.margin = s.margin;
        for (const TopEntry& e : s.top)
            t.top.append({QStringLiteral("%1 [%2]").arg(tokenText(e.id)).arg(e.id), e.logit});
        return t;
    }

    std::vector<TokenView> views(const std::vector<int64_t>& ids) const {
        std::vector<TokenView> out;
        for (const int64_t id : ids) out.push_back(view(id));
        return out;
    }

    // The batch protocol's continuations the ledger holds for `item`, alone first per kernel set.
    std::vector<AnalysisView::BatchSide> batchSides(const experiments::ItemRecord& item) const {
        std::vector<AnalysisView::BatchSide> sides;
        if (!item.results.batch) return sides;
        for (const auto& [kernels, cells] : item.results.batch->byKernels) {
            const auto& kept = item.trajectories.batch;
            const auto alone = kept.find(experiments::batchContinuationName(kernels, 1));
            if (alone == kept.end()) continue;  // a ledger from before they were kept
            sides.push_back({QString::fromStdString(kernels), 1, -1, {}, views(alone->second)});
            for (const auto& [size, cell] : cells) {
                const auto ids = kept.find(experiments::batchContinuationName(kernels, size));
                if (ids == kept.end()) continue;
                QString note = cell.logitsEqual ? QObject::tr("logits bit-equal to alone's")
                                                : QObject::tr("logits differ from %1")
                                                      .arg(QString::fromStdString(cell.firstDifferingOp.value_or("")));
                if (!cell.cacheEqual) note += QObject::tr("; the prompt's K/V differ");
                sides.push_back({QString::fromStdString(kernels), static_cast<int>(size),
                                 static_cast<int>(cell.firstDivergence.value_or(-1)), note, views(ids->second)});
            }
        }
        return sides;
    }

    SideView side(const QString& label, const GenerationResult& r) const {
        SideView s{label, {}};
        for (const StepRecord& step : r.steps) s.tokens.push_back(view(step));
        return s;
    }

    // Fills the views of the current boundary state into `v` and keeps it for transplants.
    AnalysisView finish(AnalysisView v) {
        const experiments::BoundaryState& b = *boundary;
        for (int64_t id : b.prefix) v.prefix.push_back(view(id));
        v.promptLength = static_cast<int>(b.prompt.size());
        v.live = side(QObject::tr("live (cache built while decoding)"), b.liveSuffix);
        v.prefill = side(QObject::tr("prefill (one forward over the same ids)"), b.prefillSuffix);
        v.firstDivergence = static_cast<int>(experiments::firstDivergence(b.liveSuffix.ids, b.prefillSuffix.ids));
        v.diff = diffCaches(b.live, b.prefill);
        v.layers = static_cast<int>(config->dtypes.empty() ? 0 : mainModel().config().numLayers);
        lastAnalysis = v;
        return v;
    }
};

namespace {

// The session's experiment settings: the defaults of an experiment file, on the chosen model.
// A session's experiment: the opened model in one dtype. Its budget is each request's own (the
// session page's max new tokens), set by decodeSession and analyzeSession.
ExperimentConfig sessionConfig(const std::string& dir, const std::string& dtype) {
    ExperimentConfig c;
    c.name = "session";
    c.modelDir = dir;
    c.dtypes = {dtype};
    return c;
}

}  // namespace

QString verdictOf(const std::vector<TokenView>& result, const std::vector<TokenView>& donor,
                  const std::vector<TokenView>& recipient, int* splitFromDonor) {
    const experiments::TransplantOutcome o =
        experiments::judgeTransplant(idsOf(result), idsOf(donor), idsOf(recipient));
    if (splitFromDonor) *splitFromDonor = static_cast<int>(o.splitFromDonor);
    if (o.followsDonor) return QObject::tr("follows donor");
    if (o.followsRecipient) return QObject::tr("follows recipient");
    return QObject::tr("neither");
}

void registerWorkerMetaTypes() {
    qRegisterMetaType<TokenView>();
    qRegisterMetaType<ModelSummary>();
    qRegisterMetaType<AnalysisView>();
    qRegisterMetaType<TransplantView>();
    qRegisterMetaType<SessionDecode>();
    qRegisterMetaType<SideSpec>();
    qRegisterMetaType<TrajectoryTokens>();
    qRegisterMetaType<StepLocation>();
}

ModelWorker::ModelWorker() : state_(std::make_unique<State>()) { registerWorkerMetaTypes(); }
ModelWorker::~ModelWorker() = default;

void ModelWorker::post(quint64 job, const QString& task, std::function<void()> work) {
    QMetaObject::invokeMethod(
        this,
        [this, job, task, work = std::move(work)] {
            if (!beginJob(job)) {
                emit cancelled(job, task);
                return;
            }
            emit started(job, task);
            // Guards are thread-local: created here, in the thread that runs the model.
            torch::NoGradGuard noGrad;
            try {
                work();
                endJob();
                emit finished(job, task);
            } catch (const Cancelled&) {
                endJob();
                emit cancelled(job, task);
            } catch (const std::exception& e) {
                endJob();
                emit failed(job, task, QString::fromStdString(e.what()));
            }
        },
        Qt::QueuedConnection);
}

bool ModelWorker::beginJob(quint64 job) {
    std::lock_guard lock(cancelMutex_);
    running_ = job;
    lastStarted_ = std::max(lastStarted_, job);
    const bool cancelled = job <= cancelledThrough_ || cancelledQueued_.erase(job) > 0;
    cancelRunning_.store(cancelled);
    if (cancelled) running_ = 0;
    return !cancelled;
}

void ModelWorker::endJob() {
    std::lock_guard lock(cancelMutex_);
    running_ = 0;
    cancelRunning_.store(false);
}

void ModelWorker::cancel(quint64 job) {
    std::lock_guard lock(cancelMutex_);
    if (job == running_)
        cancelRunning_.store(true);
    else if (job > lastStarted_)
        cancelledQueued_.insert(job);  // checked when it starts; an ended job needs nothing
}

void ModelWorker::cancelThrough(quint64 lastJob) {
    std::lock_guard lock(cancelMutex_);
    cancelledThrough_ = std::max(cancelledThrough_, lastJob);
    if (running_ != 0 && running_ <= lastJob) cancelRunning_.store(true);
}

void ModelWorker::openModel(quint64 job, const QString& dir, const QString& dtype) {
    post(job, tr("open model"), [this, dir = dir.toStdString(), dtype = dtype.toStdString()] {
        state_->useConfig(sessionConfig(dir, dtype), "session:" + dir + ":" + dtype);
        const Transformer& m = state_->mainModel();
        ModelSummary s;
        s.dir = QString::fromStdString(dir);
        s.dtype = QString::fromStdString(dtypeName(m.dtype()));
        s.device = QString::fromStdString(m.device().str());
        s.architecture = QString::fromStdString(architectureName(m.config().architecture));
        s.layers = static_cast<int>(m.config().numLayers);
        s.fingerprint = QString::fromStdString(m.fingerprint()).left(16);
        emit modelOpened(s);
    });
}

void ModelWorker::analyzeLedgerItem(quint64 job, const experiments::RunInfo& run, const experiments::ItemRecord& item) {
    post(job, tr("analyse item"), [this, job, run, item] {
        // First: an item without a boundary is refused by name, unless the batch protocol has
        // something to show for it (it needs the prompt only).
        const bool hasBoundary = item.status == experiments::ItemStatus::Done;
        if (!hasBoundary && !item.results.batch) experiments::storedBoundary(item);
        state_->useConfig(experiments::configOfRun(run), run.runId);
        AnalysisView v;
        v.job = job;
        v.title = QString::fromStdString(item.itemId);
        v.batch = state_->batchSides(item);
        if (!hasBoundary) {
            v.hasBoundary = false;
            emit analysisReady(v);
            return;
        }
        ItemContext ctx = state_->context();
        if (item.results.localize && item.results.localize->found) {
            const experiments::LocalizeResult& l = *item.results.localize;
            v.hasLocalize = true;
            v.localizeLayers = l.layers;
            v.localizeKeys = movesKeys(l.parts);
            v.localizeValues = movesValues(l.parts);
        }
        state_->boundary = experiments::rebuildStoredBoundary(ctx, item, [this] { return keepGoing(); });
        emit analysisReady(state_->finish(std::move(v)));
    });
}

void ModelWorker::describeTrajectory(quint64 job, const experiments::RunInfo& run,
                                     const experiments::ItemRecord& item) {
    post(job, tr("read trajectory"), [this, job, run, item] {
        useImportedRun(run);
        TrajectoryTokens t;
        t.job = job;
        t.itemId = QString::fromStdString(item.itemId);
        t.prompt = state_->views(experiments::storedTrajectory(item, "prompt", "the ledger"));
        t.output = state_->views(experiments::storedTrajectory(item, "output", "the ledger"));
        for (const auto& [label, replay] : item.results.replays)
            for (const int64_t id : replay.argmaxes) t.argmaxTexts.try_emplace(id, state_->tokenText(id));
        emit trajectoryTokensReady(t);
    });
}

void ModelWorker::locateReplayStep(quint64 job, const experiments::RunInfo& run, const experiments::ItemRecord& item,
                                   const experiments::DeltaBasis& basis, int step) {
    post(job, tr("locate step %1").arg(step), [this, job, run, item, basis, step] {
        useImportedRun(run);
        const experiments::ReplayLabel label = experiments::parseReplayLabel(basis.label);
        const Transformer& model = state_->models->get(label.precision.name(), label.kernels);
        const auto [a, b] = experiments::referencesToLocate(basis);
        const LocatorReport r = experiments::locateReplayStep(model, item, step, a, b);
        StepLocation l;
        l.job = job;
        l.itemId = QString::fromStdString(item.itemId);
        l.step = step;
        l.references = QStringLiteral("%1 vs %2").arg(QString::fromStdString(a), QString::fromStdString(b));
        l.model = tr("%1 kernels, %2")
                      .arg(QString::fromStdString(kernelsName(label.kernels)),
                           QString::fromStdString(label.precision.name()));
        l.opsCompared = static_cast<int>(r.ops.size());
        l.differs = r.firstDifference.has_value();
        if (r.firstDifference) {
            const OpComparison& op = r.ops[*r.firstDifference];
            l.firstOp = op.layer < 0 ? QString::fromStdString(op.op)
                                     : QStringLiteral("layer %1 %2").arg(op.layer).arg(QString::fromStdString(op.op));
            l.maxAbs = op.maxAbs;
            l.differing = static_cast<int>(op.differing);
            l.elements = static_cast<int>(op.elements);
        }
        emit stepLocated(l);
    });
}

// The imported run's model folder or GGUF file, for its tokenizer and (when a step is located) its
// models: the one the run was imported with, checked as `kvscope replay` checks it (once a run).
void ModelWorker::useImportedRun(const experiments::RunInfo& run) {
    const std::string key = "imported:" + run.runId;
    if (state_->contextKey == key) return;
    state_->useConfig(sessionConfig(experiments::importedModelPath(run), "bf16"), key, false);
}

void ModelWorker::decodeSession(quint64 job, const QString& promptText, const QString& promptIds, int maxNewTokens) {
    post(job, tr("decode"), [this, job, text = promptText.toStdString(), ids = promptIds.toStdString(), maxNewTokens] {
        if (!state_->config) throw UsageError("open a model first (File > Open model)");
        state_->config->maxNewTokens = maxNewTokens;
        const Transformer& m = state_->mainModel();
        SessionDecode d;
        d.job = job;
        d.promptIds = ids.empty() ? state_->tokenizer->encode(text, true) : parseIdList(ids, "prompt ids");
        if (d.promptIds.empty()) throw UsageError("the prompt is empty: type text or paste ids");
        for (int64_t id : d.promptIds) d.prompt.push_back(state_->view(id));
        const StopRules stops = stopRulesFor(m, maxNewTokens);
        const GenerationResult r =
            Generator(m).generate(d.promptIds, state_->config->sampling, stops, [&](const StepRecord& step, int64_t) {
                emit tokenDecoded(job, state_->view(step));
                return keepGoing();
            });
        if (r.stopReason == StopReason::Cancelled) throw Cancelled("decode cancelled");
        d.traceIds = r.ids;
        for (const StepRecord& step : r.steps) d.trace.push_back(state_->view(step));
        emit sessionDecoded(d);
    });
}

void ModelWorker::analyzeSession(quint64 job, const std::vector<int64_t>& prompt, const std::vector<int64_t>& trace,
                                 int boundary, int maxNewTokens) {
    post(job, tr("compare at boundary"), [this, job, prompt, trace, boundary, maxNewTokens] {
        if (!state_->config) throw UsageError("open a model first (File > Open model)");
        state_->config->maxNewTokens = maxNewTokens;
        ItemContext ctx = state_->context();
        state_->boundary = experiments::rebuildBoundary(ctx, prompt, trace, boundary, [this] { return keepGoing(); });
        AnalysisView v;
        v.job = job;
        v.title = tr("session, boundary after %1 generated tokens").arg(boundary);
        emit analysisReady(state_->finish(std::move(v)));
    });
}

void ModelWorker::transplant(quint64 job, const TransplantRequest& request) {
    post(job, tr("transplant"), [this, job, request] {
        if (!state_->boundary) throw UsageError("select an item (or compare in the session) before transplanting");
        const experiments::BoundaryState& b = *state_->boundary;
        const KvCache& donor = request.intoPrefill ? b.live : b.prefill;
        const KvCache& recipient = request.intoPrefill ? b.prefill : b.live;
        const KvSplice splice{request.keyLayers, request.valueLayers, request.positionBegin, request.positionEnd};
        const KvCache spliced = transplantKeysAndValues(recipient, donor, splice);
        ItemContext ctx = state_->context();
        const GenerationResult r = experiments::continueWithRunRules(
            ctx, spliced, b.budget, [this](const StepRecord&, int64_t) { return keepGoing(); });
        if (r.stopReason == StopReason::Cancelled) throw Cancelled("transplant cancelled");
        TransplantView v;
        v.job = job;
        v.description = QString::fromStdString((request.intoPrefill ? "prefill <- live: " : "live <- prefill: ") +
                                               (request.keyLayers.empty() && request.valueLayers.empty()
                                                    ? std::string("nothing transplanted")
                                                    : splice.describe()));
        v.result = state_->side(v.description, r);
        const AnalysisView& a = state_->lastAnalysis;
        v.verdict = verdictOf(v.result.tokens, request.intoPrefill ? a.live.tokens : a.prefill.tokens,
                              request.intoPrefill ? a.prefill.tokens : a.live.tokens, &v.splitFromDonor);
        emit transplantReady(v);
    });
}

void ModelWorker::compareSides(quint64 job, const SideSpec& a, const SideSpec& b) {
    post(job, tr("compare"), [this, job, a, b] {
        if (!state_->boundary) throw UsageError("select an item (or compare in the session) first");
        auto recipe = [](const SideSpec& spec) {
            experiments::SideRecipe r;
            r.construction = spec.construction.toStdString();
            r.dtype = spec.dtype.toStdString();
            if (!spec.kernels.isEmpty()) r.kernels = parseKernels(spec.kernels.toStdString());
            return r;
        };
        const experiments::ModelLookup models = [this](const std::string& dtype,
                                                       Kernels kernels) -> const Transformer& {
            return state_->models->get(dtype, kernels);
        };
        const experiments::SideComparison c = experiments::compareSides(
            state_->context(), models, *state_->boundary, recipe(a), recipe(b), [this] { return keepGoing(); });
        AnalysisView v;
        v.job = job;
        v.liveVsPrefill = false;
        v.title = state_->lastAnalysis.title;
        v.prefix = state_->lastAnalysis.prefix;
        v.promptLength = state_->lastAnalysis.promptLength;
        v.layers = state_->lastAnalysis.layers;
        v.live = state_->side(QString::fromStdString(c.a.label), c.a.continuation);
        v.prefill = state_->side(QString::fromStdString(c.b.label), c.b.continuation);
        v.firstDivergence = static_cast<int>(c.firstDivergence);
        if (c.diff)
            v.diff = *c.diff;
        else
            v.diffNote = tr("the two sides use different precisions: no element-wise cache difference");
        emit analysisReady(v);
    });
}

void ModelWorker::runBatch(quint64 job, const QString& experimentFile, const QString& ledgerPath) {
    post(job, tr("batch run"), [this, experimentFile, ledgerPath] {
        const ExperimentConfig config = ExperimentConfig::load(experimentFile.toStdString());
        experiments::RunOptions options;
        options.ledgerPath = ledgerPath.toStdString();
        const auto summary = experiments::runExperiment(
            config, options,
            [this](const experiments::RunProgress& p) {
                emit progress(static_cast<int>(p.done), static_cast<int>(p.total),
                              tr("item %1 (%2 tok/s)")
                                  .arg(QString::fromStdString(p.currentItem))
                                  .arg(p.tokensPerSecond, 0, 'f', 1));
            },
            cancelRunning_);
        emit batchFinished(ledgerPath,
                           tr("%1 items run in %2 s%3")
                               .arg(summary.ran)
                               .arg(summary.seconds, 0, 'f', 1)
                               .arg(summary.interrupted ? tr(" (cancelled; run again to resume)") : QString()));
        if (summary.interrupted) throw Cancelled("batch run cancelled");  // the job ends as cancelled
    });
}

}  // namespace kvscope::widgets
