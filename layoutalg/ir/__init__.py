"""The family IR: sizes as polynomials (`sizes`), index expressions in mixed-radix normal
form (`itersum`), the records of a resolved family (`resolved`), statements (`statements`),
layouts applied to sizes (`layouts`), guard rewriting (`guards`), families as symbolic digit
tables (`family`), what canonical indices claim (`claims`) and a page format's identity
(`identity`).
"""
