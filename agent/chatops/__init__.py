"""ChatOps: DingTalk and WeCom robots, their signed callbacks, approve links and the notification policy."""
