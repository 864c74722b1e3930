// Bilingual labels (en / zh); the choice is kept in localStorage.
const WORDS = {
  en: {
    "tab.chat": "Chat", "tab.approvals": "Approvals", "tab.findings": "Findings", "tab.savings": "Savings", "tab.audit": "Audit",
    "chat.intro": "Ask about waste on the cluster, what I did, savings or pending approvals.",
    "chat.placeholder": "Ask GPU Steward…", "chat.send": "Send", "chat.thinking": "working…",
    "approvals.pending": "Waiting for a human", "approvals.recent": "Recent answers", "approvals.none": "Nothing is waiting for approval.",
    "approvals.approve": "Approve", "approvals.deny": "Deny", "approvals.reason": "Reason (optional)",
    "approvals.expires": "expires", "approvals.requested": "requested", "approvals.why": "Why",
    "exempt.title": "Exempt a job", "exempt.job": "namespace/job", "exempt.reason": "reason", "exempt.submit": "Exempt",
    "exempt.done": "Exempt until", "findings.title": "Findings of the latest sweep", "findings.none": "No waste found.",
    "savings.over_time": "Reclaimed over time", "savings.by_team": "Waste by team (latest sweep)",
    "savings.gpu_hours": "GPU-hours reclaimed", "savings.money": "Money reclaimed", "savings.actions": "Actions that freed GPUs",
    "savings.waste_now": "Waste found now", "savings.empty": "Nothing reclaimed yet.",
    "audit.all": "all kinds", "audit.filter": "Filter",
    "col.action": "Action", "col.target": "Target", "col.level": "Level", "col.status": "Status", "col.by": "By",
    "col.when": "When", "col.kind": "Kind", "col.owner": "Owner", "col.since": "Since", "col.waste_h": "Waste GPU-h",
    "col.cost": "Cost", "col.evidence": "Evidence", "col.reason": "Reason",
    "mode.local-dev": "local dev mode", "mode.tokens": "token auth", "mode.proxy": "SSO",
    "suggest": ["Who is wasting A100s right now?", "What did you do today?", "How much did we save?", "Any pending approvals?"],
  },
  zh: {
    "tab.chat": "对话", "tab.approvals": "审批", "tab.findings": "发现", "tab.savings": "节省", "tab.audit": "审计",
    "chat.intro": "可以问我：集群上谁在浪费 GPU、我今天做了什么、节省了多少、有哪些待审批。",
    "chat.placeholder": "向 GPU Steward 提问…", "chat.send": "发送", "chat.thinking": "处理中…",
    "approvals.pending": "等待人工审批", "approvals.recent": "最近的审批", "approvals.none": "目前没有待审批的操作。",
    "approvals.approve": "批准", "approvals.deny": "拒绝", "approvals.reason": "理由（可选）",
    "approvals.expires": "过期时间", "approvals.requested": "申请时间", "approvals.why": "原因",
    "exempt.title": "豁免作业", "exempt.job": "命名空间/作业", "exempt.reason": "理由", "exempt.submit": "豁免",
    "exempt.done": "豁免至", "findings.title": "最近一次巡检的发现", "findings.none": "未发现浪费。",
    "savings.over_time": "累计回收", "savings.by_team": "各团队浪费（最近一次巡检）",
    "savings.gpu_hours": "回收 GPU 小时", "savings.money": "节省金额", "savings.actions": "释放 GPU 的操作",
    "savings.waste_now": "当前发现的浪费", "savings.empty": "尚未回收。",
    "audit.all": "全部类型", "audit.filter": "筛选",
    "col.action": "操作", "col.target": "对象", "col.level": "级别", "col.status": "状态", "col.by": "审批人",
    "col.when": "时间", "col.kind": "类型", "col.owner": "负责人", "col.since": "开始于", "col.waste_h": "浪费 GPU 小时",
    "col.cost": "成本", "col.evidence": "依据", "col.reason": "原因",
    "mode.local-dev": "本地开发模式", "mode.tokens": "令牌认证", "mode.proxy": "单点登录",
    "suggest": ["谁在浪费 GPU？", "你今天做了什么？", "节省了多少？", "有待审批的操作吗？"],
  },
};

export let lang = localStorage.getItem("steward.lang") || (navigator.language.startsWith("zh") ? "zh" : "en");

export function t(key) {
  return (WORDS[lang] && WORDS[lang][key]) ?? WORDS.en[key] ?? key;
}

export function applyLabels(root = document) {
  document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
  root.querySelectorAll("[data-i18n]").forEach((el) => { el.textContent = t(el.dataset.i18n); });
  root.querySelectorAll("[data-i18n-placeholder]").forEach((el) => { el.placeholder = t(el.dataset.i18nPlaceholder); });
  document.getElementById("lang-toggle").textContent = lang === "zh" ? "EN" : "中文";
}

export function toggleLang() {
  lang = lang === "zh" ? "en" : "zh";
  localStorage.setItem("steward.lang", lang);
  applyLabels();
}
