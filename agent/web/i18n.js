// Bilingual labels (en / zh); the choice is kept in localStorage.
const WORDS = {
  en: {
    "tab.chat": "Chat", "tab.approvals": "Approvals", "tab.findings": "Findings", "tab.savings": "Savings", "tab.audit": "Audit",
    "chat.intro": "Ask about waste on the cluster, what I did, savings or pending approvals.",
    "chat.placeholder": "Ask GPU Steward…", "chat.send": "Send", "chat.thinking": "working…",
    "approvals.pending": "Waiting for a human", "approvals.recent": "Recent answers", "approvals.none": "Nothing is waiting for approval.",
    "approvals.approve": "Approve", "approvals.deny": "Deny", "approvals.reason": "Reason (optional)",
    "approvals.expires": "expires", "approvals.requested": "requested", "approvals.why": "Why",
    "exempt.title": "Exempt a job", "exempt.job": "namespace/job", "exempt.reason": "reason", "exempt.duration": "duration (30m, 4h, 2d)", "exempt.submit": "Exempt",
    "exempt.done": "Exempt until", "findings.title": "Findings of the latest sweep", "findings.none": "No waste found.",
    "savings.over_time": "Reclaimed over time", "savings.by_team": "Waste by team (latest sweep)",
    "savings.gpu_hours": "GPU-hours reclaimed", "savings.money": "Money reclaimed", "savings.actions": "Actions that freed GPUs",
    "savings.waste_now": "Waste found now", "savings.empty": "Nothing reclaimed yet.",
    "audit.all": "all kinds", "audit.filter": "Filter", "audit.none": "No entries match.",
    "audit.prev": "Previous page", "audit.next": "Next page", "lang.toggle": "Switch language",
    "col.action": "Action", "col.target": "Target", "col.level": "Level", "col.status": "Status", "col.by": "By", "col.set_by": "By",
    "col.when": "When", "col.kind": "Kind", "col.owner": "Owner", "col.since": "Since", "col.waste_h": "Waste GPU-h",
    "col.cost": "Cost", "col.evidence": "Evidence", "col.reason": "Reason", "col.util": "GPU util",
    "mode.local-dev": "local dev mode", "mode.tokens": "token auth", "mode.proxy": "SSO",
    "degraded.title": "Degraded: the steward is up but cannot do everything.",
    "degraded.data_dir_readonly": "Data dir is read-only: nothing is recorded, so nothing is swept or done.",
    "degraded.data_dir_full": "Data dir is full: writes fail, so actions stop.",
    "degraded.db_locked": "A database is locked by another process.",
    "degraded.db_error": "A database cannot be written.",
    "degraded.audit_chain_broken": "The audit log fails its hash check: nothing is done on it. Run `steward audit verify`.",
    "degraded.answers_incomplete": "An answered approval is recorded but not yet carried out; it completes on its own.",
    "degraded.sweep_failing": "Sweeps are failing.",
    "degraded.backend_unavailable": "Cluster data is incomplete: nothing is judged on it.",
    "degraded.notify_failing": "No owner warning of the last sweep was delivered: no notice runs, so nothing is stopped.",
    "degraded.planner_degraded": "The planner model did not answer: the built-in policy model planned the last sweep.",
    "status.ended": "The demo scenario has ended: the simulated clock stands still. Findings, approvals and savings stay as they were at the end (a server restarted after the end shows findings once a sweep runs: Sweep now). To play it again, remove sim-clock.json from the data dir.",
    "status.sweep_now": "Sweep now", "status.running_first": "First sweep running since", "status.running": "Sweep running since",
    "status.last": "Last sweep", "status.next": "next due", "status.none_yet": "No sweep has finished yet.",
    "status.started": "Sweep started.", "status.done": "Sweep finished; findings:", "status.offline": "Live status unavailable; retrying…",
    "findings.first_running": "The first sweep is still running (it reads the cluster and builds the runbook index); findings appear when it finishes.",
    "findings.no_sweep": "No sweep has run yet.",
    "col.state": "Status", "col.outcome": "Outcome", "col.until": "Until", "col.granted": "Granted",
    "state.stopped": "stopped", "state.stopping": "SIGTERM sent", "state.exempt_until": "exempt until", "state.denied_until": "denied, held until",
    "state.warned": "warned", "state.advised": "owner told", "state.stop_due": "stop due", "state.awaiting": "awaiting approval", "state.open": "new",
    "approvals.per_hour": "/hour", "approvals.see_finding": "finding", "approvals.report": "Full report",
    "approvals.dismiss": "Close", "approvals.no_recent": "No answers yet.",
    "approvals.resize_to": "Resize to", "approvals.nodes": "nodes",
    "exempt.active": "Exemptions in force", "exempt.none": "No exemption is in force.", "exempt.revoke": "Revoke",
    "exempt.revoked": "Exemption revoked:",
    "savings.hours_over_time": "GPU-hours reclaimed over time", "savings.money_over_time": "Money reclaimed over time",
    "savings.by_pool": "Waste on pools and nodes (latest sweep)", "savings.no_waste": "No waste in the latest sweep.",
    "unit.gpu_hours": "GPU-h",
    "action.notify": "warn", "action.terminate": "stop", "action.force_terminate": "force stop", "action.resize_pool": "resize pool",
    "status.dry_run": "dry run", "kind.overprovisioned": "over-provisioned", "kind.node_health": "node health",
    "kind.idle_serving": "idle service", "kind.stuck_pending": "stuck pending", "kind.crash_loop": "crash loop",
    "kind.pool_scale_up": "planned scale-up", "kind.quiet_fill": "quiet-window fill",
    "col.gpus": "GPUs", "action.drain_node": "drain node", "action.keep": "keep", "action.cordon": "cordon",
    "action.post_digest": "post digest", "level": "L", "clock.title": "cluster time", "tool.ok": "ok", "tool.error": "error",
    "col.namespace": "Namespace", "col.team": "Team", "col.pool": "Pool", "filter.all": "all",
    "export.csv": "Export CSV", "export.json": "Export JSON", "findings.shown": "shown", "approvals.metrics": "metrics",
    "akind.finding": "finding", "akind.proposal": "proposal", "akind.decision": "decision", "akind.approval": "approval",
    "akind.execution": "execution", "akind.stop_confirmed": "stop confirmed", "akind.exemption": "exemption",
    "akind.report": "report", "akind.change": "change", "akind.change_impact": "change impact",
    "akind.usage": "usage sample", "akind.served": "seen serving",
    "suggest": ["Who is wasting A100s right now?", "What did you do today?", "How much did we save?", "Any pending approvals?"],
  },
  zh: {
    "tab.chat": "对话", "tab.approvals": "审批", "tab.findings": "发现", "tab.savings": "节省", "tab.audit": "审计",
    "chat.intro": "可以问我：集群上谁在浪费 GPU、我今天做了什么、节省了多少、有哪些待审批。",
    "chat.placeholder": "向 GPU Steward 提问…", "chat.send": "发送", "chat.thinking": "处理中…",
    "approvals.pending": "等待人工审批", "approvals.recent": "最近的审批", "approvals.none": "目前没有待审批的操作。",
    "approvals.approve": "批准", "approvals.deny": "拒绝", "approvals.reason": "理由（可选）",
    "approvals.expires": "过期时间", "approvals.requested": "申请时间", "approvals.why": "原因",
    "exempt.title": "保留作业", "exempt.job": "命名空间/作业", "exempt.reason": "理由", "exempt.duration": "时长（如 30m、4h、2d）", "exempt.submit": "保留",
    "exempt.done": "保留至", "findings.title": "最近一次巡检的发现", "findings.none": "未发现浪费。",
    "savings.over_time": "累计回收", "savings.by_team": "各团队浪费（最近一次巡检）",
    "savings.gpu_hours": "回收 GPU 小时", "savings.money": "节省金额", "savings.actions": "释放 GPU 的操作",
    "savings.waste_now": "当前发现的浪费", "savings.empty": "尚未回收。",
    "audit.all": "全部类型", "audit.filter": "筛选", "audit.none": "没有符合条件的记录。",
    "audit.prev": "上一页", "audit.next": "下一页", "lang.toggle": "切换语言",
    "col.action": "操作", "col.target": "对象", "col.level": "级别", "col.status": "状态", "col.by": "操作人", "col.set_by": "设置人",
    "col.when": "时间", "col.kind": "类型", "col.owner": "负责人", "col.since": "开始于", "col.waste_h": "浪费 GPU 小时",
    "col.cost": "成本", "col.evidence": "依据", "col.reason": "原因", "col.util": "GPU 利用率",
    "mode.local-dev": "本地开发模式", "mode.tokens": "令牌认证", "mode.proxy": "单点登录",
    "degraded.title": "降级运行：服务仍在运行，但部分功能不可用。",
    "degraded.data_dir_readonly": "数据目录只读：无法记录，因此不巡检、不执行任何操作。",
    "degraded.data_dir_full": "数据目录已满：写入失败，操作已停止。",
    "degraded.db_locked": "数据库被其他进程锁定。",
    "degraded.db_error": "数据库无法写入。",
    "degraded.audit_chain_broken": "审计日志哈希校验失败：不会据此执行任何操作。请运行 `steward audit verify`。",
    "degraded.answers_incomplete": "已记录的审批尚未执行完毕，将自动完成。",
    "degraded.sweep_failing": "巡检持续失败。",
    "degraded.backend_unavailable": "集群数据不完整：不据此做任何判定。",
    "degraded.notify_failing": "上次巡检的所有者警告均未送达：通知期未开始，因此不会停止任何作业。",
    "degraded.planner_degraded": "规划模型未响应：上次巡检由内置策略模型规划。",
    "status.ended": "演示场景已结束：模拟时钟已停止。发现、审批与节省保持结束时的状态（结束后重启的服务在运行一次巡检后才显示发现：点击“立即巡检”）。要重新播放，请删除数据目录中的 sim-clock.json。",
    "status.sweep_now": "立即巡检", "status.running_first": "首次巡检进行中，开始于", "status.running": "巡检进行中，开始于",
    "status.last": "上次巡检", "status.next": "下次", "status.none_yet": "尚无完成的巡检。",
    "status.started": "已开始巡检。", "status.done": "巡检完成，发现数：", "status.offline": "实时状态不可用，正在重试…",
    "findings.first_running": "首次巡检仍在进行（读取集群并建立运行手册索引），完成后显示发现。",
    "findings.no_sweep": "尚未进行巡检。",
    "col.state": "状态", "col.outcome": "结果", "col.until": "截止", "col.granted": "授予时间",
    "state.stopped": "已停止", "state.stopping": "已发送 SIGTERM", "state.exempt_until": "保留至", "state.denied_until": "已拒绝，保持至",
    "state.warned": "已提醒", "state.advised": "已告知所有者", "state.stop_due": "最早停止", "state.awaiting": "等待审批", "state.open": "新发现",
    "approvals.per_hour": "/小时", "approvals.see_finding": "查看发现", "approvals.report": "完整报告",
    "approvals.dismiss": "关闭", "approvals.no_recent": "暂无审批记录。",
    "approvals.resize_to": "缩容到", "approvals.nodes": "个节点",
    "exempt.active": "生效中的保留", "exempt.none": "目前没有生效的保留。", "exempt.revoke": "撤销",
    "exempt.revoked": "已撤销保留：",
    "savings.hours_over_time": "累计回收 GPU 小时", "savings.money_over_time": "累计节省金额",
    "savings.by_pool": "资源池与节点的浪费（最近一次巡检）", "savings.no_waste": "最近一次巡检未发现浪费。",
    "unit.gpu_hours": "GPU 小时",
    "action.notify": "警告", "action.terminate": "优雅停止", "action.force_terminate": "强制停止", "action.resize_pool": "调整节点池",
    "action.drain_node": "排空节点", "col.gpus": "GPU 数", "action.keep": "保留", "action.cordon": "封锁节点",
    "action.post_digest": "发送成本摘要", "level": "级别 ", "clock.title": "集群时间",
    "col.namespace": "命名空间", "col.team": "团队", "col.pool": "资源池", "filter.all": "全部",
    "export.csv": "导出 CSV", "export.json": "导出 JSON", "findings.shown": "条显示", "approvals.metrics": "指标",
    "akind.finding": "发现", "akind.proposal": "提议", "akind.decision": "护栏判定", "akind.intent": "准备执行",
    "akind.execution": "执行", "akind.approval": "审批", "akind.stop_confirmed": "确认停止", "akind.exemption": "保留",
    "akind.report": "报告", "akind.error": "错误", "akind.alert_incident": "告警事件",
    "akind.change": "变更", "akind.change_impact": "变更影响", "akind.usage": "用量记录", "akind.served": "服务记录", "status.detected": "自动发现", "status.recorded": "已记录",
    "status.flagged": "已标记上升",
    "status.allow": "允许", "status.deny": "拒绝", "status.needs_approval": "需审批", "status.proposed": "已提议",
    "status.acting": "执行中", "status.granted": "已保留", "status.revoked": "已撤销", "status.sweep": "巡检",
    "status.pending_approval": "待审批", "status.denied_by_human": "被人工拒绝", "status.reasked": "再次请求",
    "status.escalated": "已升级", "status.confirmed": "已确认", "status.approval": "审批", "tool.ok": "完成", "tool.error": "出错",
    "tool.no_data": "无数据", "tool.refused": "未受理", "tool.needs_approval": "需人工审批",
    "kind.keepalive": "保活", "kind.queue": "排队",
    "status.pending": "待审批", "status.approved": "已批准", "status.denied": "已拒绝", "status.expired": "已过期",
    "status.executed": "已执行", "status.skipped": "已跳过", "status.blocked": "已拦截", "status.failed": "失败",
    "status.refused": "被拒绝", "status.dry_run": "演练",
    "kind.idle": "空闲", "kind.zombie": "僵尸", "kind.overprovisioned": "超配", "kind.oversized": "节点池过大",
    "kind.node_health": "节点健康", "kind.idle_serving": "推理服务空闲", "kind.stuck_pending": "排队无法调度",
    "kind.doomed": "注定失败", "kind.crash_loop": "崩溃循环",
    "kind.pool_scale_up": "节点池计划扩容", "kind.quiet_fill": "低负载窗口填充",
    "suggest": ["谁在浪费 GPU？", "你今天做了什么？", "节省了多少？", "有待审批的操作吗？"],
  },
};

// The reader's own pick, else the team's language the operator set (STEWARD_LANGUAGE, via /healthz), else the browser's.
export let lang = localStorage.getItem("steward.lang") || (navigator.language.startsWith("zh") ? "zh" : "en");

// The server's configured language, when the reader has not picked one: true when it changed the page's language.
export function adoptServerLang(serverLang) {
  if (!serverLang || localStorage.getItem("steward.lang") || serverLang === lang) return false;
  lang = serverLang;
  applyLabels();
  return true;
}

export function t(key) {
  return (WORDS[lang] && WORDS[lang][key]) ?? WORDS.en[key] ?? key;
}

// A value's label ("status", "approved"): the translation when there is one, else the value itself.
export function tv(prefix, value) {
  const key = `${prefix}.${value}`;
  const text = t(key);
  return text === key ? String(value ?? "") : text;
}

// The code a label stands for ("已执行" -> "executed"), looked up under the prefixes given; else the text itself.
export function untranslate(prefixes, text) {
  for (const words of [WORDS[lang], WORDS.en]) {
    for (const [key, value] of Object.entries(words || {})) {
      const [prefix, code] = [key.slice(0, key.indexOf(".")), key.slice(key.indexOf(".") + 1)];
      if (prefixes.includes(prefix) && String(value).toLowerCase() === text.toLowerCase()) return code;
    }
  }
  return text;
}

// A colon as the language writes it after a label: "Why: " / "原因：".
export function colon() {
  return lang === "zh" ? "：" : ": ";
}

// The time zone the page's times are in, named in the headers of the columns that hold times ("When (UTC)").
let zoneLabel = "";
function labelled(el) {
  return t(el.dataset.i18n) + (zoneLabel && el.hasAttribute("data-zoned") ? ` (${zoneLabel})` : "");
}

export function setZoneLabel(zone) {
  if (zone === zoneLabel) return;
  zoneLabel = zone;
  document.querySelectorAll("[data-zoned][data-i18n]").forEach((el) => { el.textContent = labelled(el); });
}

export function applyLabels(root = document) {
  document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
  root.querySelectorAll("[data-i18n]").forEach((el) => { el.textContent = labelled(el); });
  root.querySelectorAll("[data-i18n-placeholder]").forEach((el) => { el.placeholder = t(el.dataset.i18nPlaceholder); });
  root.querySelectorAll("[data-i18n-aria]").forEach((el) => el.setAttribute("aria-label", t(el.dataset.i18nAria)));
  root.querySelectorAll("[data-i18n-title]").forEach((el) => { el.title = t(el.dataset.i18nTitle); });
  document.getElementById("lang-toggle").textContent = lang === "zh" ? "EN" : "中文";
}

export function toggleLang() {
  lang = lang === "zh" ? "en" : "zh";
  localStorage.setItem("steward.lang", lang);
  applyLabels();
}
