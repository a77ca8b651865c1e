"""What tests share: one bounded poll (`eventually`); the fakes and the daemon harness live beside it in tests/."""
