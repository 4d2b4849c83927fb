"""Plans between configurations, built from runtime mappings: direct reshard plans
(`reshard`) and conversions between pages of two formats (`pageformat`).
"""
